#!/usr/bin/env python
"""Exactly-once under many seeded SIGKILLs: the crash harness as a benchmark.

Runs :func:`streamtable.testing.crash.run_crash_test` repeatedly against one embedded broker,
``--kills-per-run`` kills per run, until ``--kills`` kills in total, each run with its own seed
(derived from ``--seed``). Prints ONE JSON object on stdout: every run's seed, kill moments,
restart times and verification, plus totals. A failing run replays with
``python bench/crash.py --seed S --runs 1`` using the failing run's seed as ``--seed`` and
``--kills-per-run`` as printed. Each finished run is also logged to stderr as it completes.

    python bench/crash.py [--kills 100] [--kills-per-run 10] [--seed N]
                          [--guarantee exactly_once_v2|at_least_once] [--records N]
                          [--topology simple|chain]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import json_only_stdout, print_result  # noqa: E402

log = logging.getLogger("bench.crash")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--kills", type=int, default=100, help="kills in total")
    ap.add_argument("--kills-per-run", type=int, default=10)
    ap.add_argument("--runs", type=int, default=None, help="stop after this many runs")
    ap.add_argument("--seed", type=int, default=None, help="master seed (random if omitted)")
    ap.add_argument("--guarantee", default="exactly_once_v2")
    ap.add_argument("--records", type=int, default=30000, help="input records per run")
    ap.add_argument("--keys", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--max-offsets-per-trigger", type=int, default=1000)
    ap.add_argument("--max-kill-delay", type=float, default=4.0, help="seconds")
    ap.add_argument(
        "--topology",
        choices=("simple", "chain"),
        default="simple",
        help="chain: also join -> re-key -> aggregate through a repartition topic",
    )
    args = ap.parse_args(argv)
    real_stdout = json_only_stdout()

    from streamtable.broker import EmbeddedKafka
    from streamtable.testing.crash import run_crash_test

    master = random.SystemRandom().randrange(2**31) if args.seed is None else args.seed
    seeds = random.Random(master)
    runs: list[dict] = []
    t0 = time.monotonic()
    kills = 0
    with EmbeddedKafka() as kafka, tempfile.TemporaryDirectory(prefix="crash-bench-") as tmp:
        while kills < args.kills and (args.runs is None or len(runs) < args.runs):
            seed = master if args.runs == 1 else seeds.randrange(2**31)
            n = min(args.kills_per_run, args.kills - kills)
            try:
                report = run_crash_test(
                    kafka.bootstrap_servers,
                    Path(tmp) / f"run-{len(runs)}",
                    records=args.records,
                    keys=args.keys,
                    partitions=args.partitions,
                    kills=n,
                    seed=seed,
                    guarantee=args.guarantee,
                    max_kill_delay_s=args.max_kill_delay,
                    max_offsets_per_trigger=args.max_offsets_per_trigger,
                    topology=args.topology,
                )
                entry = report.to_json()
            except Exception as e:  # a run that could not finish is a failure too
                entry = {"seed": seed, "error": str(e)[-2000:], "exactly_once": False}
            entry["kills_per_run"] = n
            runs.append(entry)
            kills += len(entry.get("kills", []))
            log.info("run %d: %s", len(runs), json.dumps(entry))
            if "error" in entry:
                kills += n  # do not loop forever on a broken setup
    exact = [r for r in runs if r.get("exactly_once")]
    restarts = [s for r in runs for s in r.get("restarts_s", [])]
    result = {
        "benchmark": "crash",
        "guarantee": args.guarantee,
        "topology": args.topology,
        "master_seed": master,
        "runs": runs,
        "kills": sum(len(r.get("kills", [])) for r in runs),
        "runs_exactly_once": len(exact),
        "runs_failed": [r["seed"] for r in runs if not r.get("exactly_once")],
        "all_exactly_once": len(exact) == len(runs),
        "restart_to_first_output_s_median": sorted(restarts)[len(restarts) // 2]
        if restarts
        else None,
        "seconds": round(time.monotonic() - t0, 1),
        "load_avg": os.getloadavg(),
    }
    print_result(result, real_stdout)
    return 0 if result["all_exactly_once"] else 1


if __name__ == "__main__":
    sys.exit(main())
