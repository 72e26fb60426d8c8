"""Quix Streams as a benchmark engine: its virtual environment and a timed run of one of its
apps (``bench/quix_*.py``), shared by ``bench/wordcount.py`` and ``bench/windows.py``.

Quix Streams pins its own confluent-kafka, so its apps run in a virtual environment of their
own under ``$STREAMTABLE_PEERS_HOME``, else ``~/.cache/streamtable/peers`` (made with pip on
first use), as processes that import nothing of streamtable. An app takes its settings as one
JSON argument, prints ``READY <unix time>`` just before ``Application.run()`` and runs until
SIGTERM.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import run as bench_run

log = logging.getLogger("bench.quix")

QUIX_VERSION = "3.28.1"
#: Quix's ``commit_interval`` in the benchmarks, seconds (streamtable's default trigger is 1 s).
QUIX_COMMIT_INTERVAL_S = 1.0


def quix_python() -> Path:
    """The Python of a virtual environment with Quix Streams ``QUIX_VERSION`` (made once)."""
    from streamtable.platform._process import cache_home

    env = cache_home("STREAMTABLE_PEERS_HOME", "peers") / f"quixstreams-{QUIX_VERSION}"
    python = env / "bin" / "python"
    if not (env / ".complete").exists():
        shutil.rmtree(env, ignore_errors=True)
        log.info("making a virtual environment with quixstreams %s in %s", QUIX_VERSION, env)
        subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", f"quixstreams=={QUIX_VERSION}"],
            check=True,
            stdout=sys.stderr,
        )
        (env / ".complete").touch()
    return python


def run_quix(
    app: str,
    bs: str,
    input_topic: str,
    out_topic: str,
    tmp: Path,
    settings: dict[str, Any] | None = None,
    repartitions: bool = False,
) -> dict[str, Any]:
    """Run ``bench/<app>`` on ``input_topic`` until its consumer group has committed the
    input's end offsets and those of its repartition topics (with ``repartitions``, at least
    one must exist); then stop it.

    Returns ``total_s`` (process start to caught up), ``startup_s`` (to ``READY``) and
    ``processing_s`` (the difference), in seconds.

    Raises
    ------
    RuntimeError
        If the app exits before it is caught up.
    TimeoutError
        If it is not caught up within ``bench_run.CATCH_UP_TIMEOUT_S``.
    """
    from streamtable.reference.kafka_streams import _Lag, _stop

    group = f"bench-quix-{uuid.uuid4().hex[:6]}"
    cfg = {
        "bootstrap_servers": bs,
        "group": group,
        "input": input_topic,
        "output": out_topic,
        "state_dir": tempfile.mkdtemp(prefix=f"{group}-", dir=tmp),
        "commit_interval_s": QUIX_COMMIT_INTERVAL_S,
        **(settings or {}),
    }
    lag = _Lag(bs, group)
    inputs = lag.watermarks([input_topic])
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [str(quix_python()), str(Path(__file__).with_name(app)), json.dumps(cfg)],
        stdout=subprocess.PIPE,
        stderr=sys.stderr,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        ready = proc.stdout.readline()
        if not ready.startswith("READY"):
            raise RuntimeError(f"Quix Streams app exited before running (code {proc.wait()})")
        t_ready = time.monotonic()
        prefix = f"repartition__{group}--"
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"Quix Streams app exited with code {proc.returncode}")
            behind = lag.behind(inputs)
            if not behind:
                topics = [
                    t for t in lag.consumer.list_topics(timeout=30).topics if t.startswith(prefix)
                ]
                if topics:
                    behind = lag.behind(lag.watermarks(topics))
                elif repartitions:
                    behind = ["no repartition topic"]
                if not behind:
                    break
            if time.monotonic() - t0 > bench_run.CATCH_UP_TIMEOUT_S:
                raise TimeoutError(f"Quix Streams app did not catch up: {'; '.join(behind[:5])}")
            time.sleep(0.2)
        t_done = time.monotonic()
    finally:
        _stop(proc)
        lag.close()
    return {
        "total_s": round(t_done - t0, 3),
        "startup_s": round(t_ready - t0, 3),
        "processing_s": round(t_done - t_ready, 3),
    }
