"""streamtable._watchdog: a process's services are stopped when the process dies first."""

import os
import signal
import subprocess
import sys

import pytest

from _support import wait_until
from streamtable import _watchdog
from streamtable.platform._process import pid_alive

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")

# A process that starts a service in a group of its own, guards it, prints the service's pid
# and its watchdog's, then waits for its stdin to close.
_OWNER = """
import os, subprocess, sys
from datetime import timedelta
from streamtable import _watchdog
from streamtable.platform._process import descendants

grace, release, *service = sys.argv[1:]
proc = subprocess.Popen(service, start_new_session=True)
_watchdog.guard(proc.pid, grace=timedelta(seconds=float(grace)))
if release == "release":
    _watchdog.release(proc.pid)
watchdog = [p for p in descendants(os.getpid()) if p != proc.pid]
print(proc.pid, *watchdog, flush=True)
sys.stdin.read()
"""


def _start_owner(service: list[str], *, grace: float = 10.0, release: bool = False):
    owner = subprocess.Popen(
        [sys.executable, "-c", _OWNER, str(grace), "release" if release else "keep", *service],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    pids = [int(p) for p in owner.stdout.readline().split()]
    assert len(pids) == 2, pids  # the service and one watchdog
    return owner, pids[0], pids[1]


def _cleanup(owner, *pids: int) -> None:
    if owner.poll() is None:
        owner.kill()
    owner.wait(timeout=30)
    for pid in pids:
        if pid_alive(pid):
            os.killpg(pid, signal.SIGKILL)


def test_the_service_of_a_killed_process_gets_its_polite_signal():
    owner, service, watchdog = _start_owner(["sleep", "600"])
    try:
        assert pid_alive(service)
        owner.kill()  # SIGKILL: no cleanup in the owner
        wait_until(lambda: not pid_alive(service), 20, "the guarded service still runs")
        wait_until(lambda: not pid_alive(watchdog), 20, "the watchdog did not exit")
    finally:
        _cleanup(owner, service, watchdog)


def test_a_service_that_ignores_sigterm_gets_sigkill_after_its_grace():
    ignoring = ["sh", "-c", "trap '' TERM; exec sleep 600"]  # ignored signals survive exec
    owner, service, watchdog = _start_owner(ignoring, grace=0.5)
    try:
        owner.stdin.close()  # the owner exits normally, leaving its service running
        owner.wait(timeout=30)
        wait_until(lambda: not pid_alive(service), 20, "the SIGTERM-proof service still runs")
    finally:
        _cleanup(owner, service, watchdog)


def test_a_released_service_is_left_running():
    owner, service, watchdog = _start_owner(["sleep", "600"], release=True)
    try:
        owner.kill()
        wait_until(lambda: not pid_alive(watchdog), 20, "the watchdog did not exit")
        assert pid_alive(service), "the watchdog stopped a released service"
    finally:
        _cleanup(owner, service, watchdog)


def test_a_reused_pid_is_left_alone():
    me = os.getpid()
    assert _watchdog._alive(me, _watchdog._start_time(me))
    assert not _watchdog._alive(me, "1")  # the pid of a process that started at another time
    assert not _watchdog._alive(2**22 + 1, "-")  # no such process
