"""The benchmark scripts under ``bench/`` still import and parse their arguments.

They run for minutes against a broker and Spark, so the suite does not run them; this catches
what a refactoring of streamtable breaks in them (a renamed module, function or option) without
starting a JVM: each script is run as ``__main__`` with ``--help``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"

# runs every script with --help in one fresh interpreter (the scripts put bench/ on sys.path
# and import each other, which the test process should not inherit)
_PROBE = r"""
import contextlib, io, json, runpy, sys
results = {}
for path in sys.argv[1:]:
    out = io.StringIO()
    sys.argv = [path, "--help"]
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path(path, run_name="__main__")
        code = "returned without printing help"
    except SystemExit as e:
        code = e.code or 0
    except BaseException as e:  # noqa: BLE001 - reported per script
        code = f"{type(e).__name__}: {e}"
    results[path] = {"code": code, "help": out.getvalue()}
print(json.dumps(results))
"""

# run in a virtual environment of its own (Quix Streams is not a dependency of streamtable)
_OWN_ENVIRONMENT = {"quix_app.py", "quix_windows.py", "quix_wordcount.py"}
# imported by the scripts, not run
_HELPERS = {"quix.py"}


def _scripts() -> list[Path]:
    return sorted(p for p in BENCH.glob("*.py") if p.name not in _OWN_ENVIRONMENT | _HELPERS)


def test_every_benchmark_script_imports_and_prints_its_help():
    scripts = _scripts()
    assert len(scripts) >= 10, scripts
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, *map(str, scripts)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    broken = {
        Path(path).name: r["code"]
        for path, r in results.items()
        if r["code"] != 0 or "usage:" not in r["help"]
    }
    assert broken == {}, f"benchmark scripts that no longer start: {broken}"


def test_scripts_run_in_their_own_environment_still_compile():
    for name in sorted(_OWN_ENVIRONMENT):
        path = BENCH / name
        compile(path.read_text(encoding="utf-8"), str(path), "exec")


def _bench_run():
    """bench/run.py, loaded under a name of its own (bench/ is not on this process's path)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_run_under_test", BENCH / "run.py")
    assert spec is not None and spec.loader is not None
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)
    return run


def test_key_value_arguments_refuse_an_entry_without_a_key():
    import argparse

    import pytest

    run = _bench_run()
    ap = argparse.ArgumentParser(prog="bench")
    assert run.key_values(ap, ["a.b=1", "c=x=y"], "--config") == {"a.b": "1", "c": "x=y"}
    assert run.key_values(ap, ["spark.x=2"], "--config", "spark.") == {"spark.x": "2"}
    for entries, prefix in (
        (["a"], ""),
        (["=1"], ""),
        (["spark.=1"], "spark."),
        (["x=1"], "spark."),
    ):
        with pytest.raises(SystemExit):
            run.key_values(ap, entries, "--config", prefix)


def test_cpu_figures_count_this_process_and_a_child_by_kind():
    """The benchmarks' CPU figures: the CPU this process spends between two snapshots is
    ``bench_process``'s, a child started in between counts from zero under its kind, and the
    machine's busy fraction covers both."""
    import os
    import subprocess
    import sys
    import time

    run = _bench_run()
    burn = (
        "import sys, time\n"
        "t = time.process_time()\n"
        "while time.process_time() - t < 0.3: pass\n"
        "print('burnt', flush=True); sys.stdin.read()"
    )
    spent = time.process_time()  # this process's CPU, all its threads
    before = run.cpu_snapshot()
    # its command line ends as a local session's Python worker daemon's does
    child = subprocess.Popen(
        [sys.executable, "-c", burn, "streamtable.runtime.worker_daemon", "pyspark.worker"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "burnt\n"
        t = time.process_time()
        while time.process_time() - t < 1.0:  # CPU, not wall time
            pass
        after = run.cpu_snapshot()
        spent = time.process_time() - spent
    finally:
        child.communicate("")
    got = run.cpu_figures(before, after)
    seconds = got["seconds"]
    own = got["cores"]["bench_process"] * seconds
    assert abs(own - spent) <= 0.1, (own, spent, got)  # clock ticks are 10 ms
    workers = got["cores"]["python_workers"] * seconds
    assert 0.28 <= workers <= 1.0, got  # its 0.3 s, its start-up, nothing from before
    # a JVM's compiler threads are part of its CPU (a test session runs JVMs of its own)
    assert all(c <= got["cores"][kind] + 0.002 for kind, c in got["jit_cores"].items()), got
    cpus = os.cpu_count() or 1
    assert (own + workers) / (seconds * cpus) - 0.05 <= got["machine_busy_fraction"] <= 1, got
