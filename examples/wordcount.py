"""Kafka's WordCountDemo as a script: count the words of a text file.

The topology is ``streamtable.demo.wordcount.build_topology`` (Java ``split("\\W+")`` semantics):

    python examples/wordcount.py README.md
    python examples/wordcount.py book.txt --bootstrap-servers localhost:9092
"""

import argparse
from pathlib import Path

from streamtable.demo import wordcount

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("text_file", type=Path)
parser.add_argument("--bootstrap-servers", default=None, help="a broker (default: embedded)")
args = parser.parse_args()

print(wordcount.build_topology().describe())
wordcount.run(args.text_file.read_text(encoding="utf-8").splitlines(), args.bootstrap_servers)
