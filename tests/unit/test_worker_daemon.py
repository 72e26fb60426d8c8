"""The worker daemon freezes its objects before it forks a worker, and only in itself: a
worker that forks in turn keeps its own objects collectable."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.unit

#: Runs the daemon's main() with a stand-in for PySpark's manager that makes objects, forks a
#: "worker" as the manager does, and has that worker fork once more. Exit code 0: the worker
#: found the manager's new objects frozen and its own child froze nothing of the worker's.
_SCRIPT = textwrap.dedent(
    """
    import gc, os, sys
    import pyspark.daemon
    from streamtable.runtime import worker_daemon

    def manager():
        made = [[i] for i in range(5000)]  # made by the manager, before its first fork
        before = gc.get_freeze_count()
        pid = os.fork()
        if pid == 0:  # the worker
            if gc.get_freeze_count() < before + len(made) // 2:  # (a few may be untracked)
                os._exit(1)
            own = [[i] for i in range(5000)]
            frozen = gc.get_freeze_count()
            child = os.fork()
            if child == 0:
                os._exit(0 if gc.get_freeze_count() == frozen else 2)
            _, status = os.waitpid(child, 0)
            os._exit(os.waitstatus_to_exitcode(status) or (3 if len(own) != 5000 else 0))
        _, status = os.waitpid(pid, 0)
        sys.exit(os.waitstatus_to_exitcode(status))

    pyspark.daemon.manager = manager
    worker_daemon.main()
    """
)


def test_the_daemon_freezes_before_each_fork_and_a_worker_s_own_fork_does_not():
    proc = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, timeout=120)
    assert proc.returncode == 0, {
        1: "the worker's inherited objects were not frozen",
        2: "a worker's fork froze",
    }.get(proc.returncode, proc.stderr.decode()[-2000:])
