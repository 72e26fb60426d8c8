"""What the Quix Streams apps of the benchmarks (``bench/quix_*.py``) share: the application
built from their JSON settings (``bench/quix.py``'s ``run_quix``) and how they run.

Imported in Quix's own virtual environment; imports nothing of streamtable.
"""

from __future__ import annotations

import time
from typing import Any

from quixstreams import Application


def application(cfg: dict[str, Any]) -> Application:
    """The app reading from the earliest offsets as consumer group ``cfg["group"]``, at least
    once, committing every ``cfg["commit_interval_s"]`` seconds, state under
    ``cfg["state_dir"]`` (RocksDB).
    """
    return Application(
        broker_address=cfg["bootstrap_servers"],
        consumer_group=cfg["group"],
        auto_offset_reset="earliest",
        commit_interval=cfg["commit_interval_s"],
        state_dir=cfg["state_dir"],
        processing_guarantee="at-least-once",
        loglevel="WARNING",
    )


def run(app: Application) -> None:
    """Print ``READY <unix time>`` (what ``run_quix`` waits for), then run until SIGTERM."""
    print(f"READY {time.time()}", flush=True)
    app.run()
