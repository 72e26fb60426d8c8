"""streamtable._watchdog: a process's services are stopped when the process dies first."""

import json
import os
import signal
import subprocess
import sys

import pytest

from _support import wait_until
from streamtable import _watchdog
from streamtable.platform._process import descendants, pid_alive

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")

# The owner of services: it runs the commands it reads on stdin, prints a pid for each, and
# exits at end-of-file (leaving its services to its watchdog).
_OWNER = """
import json, os, signal, subprocess, sys
from datetime import timedelta
from streamtable import _watchdog

for line in sys.stdin:
    command, *args = json.loads(line)
    if command == "guard":  # guard GRACE ARGV...: start a service in a group of its own
        proc = subprocess.Popen(args[1:], start_new_session=True)
        _watchdog.guard(proc.pid, grace=timedelta(seconds=float(args[0])))
        print(proc.pid, flush=True)
    elif command == "release":
        _watchdog.release(int(args[0]))
        print(args[0], flush=True)
    elif command == "fork":  # a forked child that outlives its parent
        child = os.fork()
        if child == 0:
            signal.pause()  # until the test's clean-up kills it
            os._exit(0)
        print(child, flush=True)
    elif command == "watchdog":
        print(_watchdog._channel.pid, flush=True)
    elif command == "pipe":  # the descriptor number of the pipe to the watchdog
        print(_watchdog._channel.fd, flush=True)
    elif command == "open":  # open PATH FD: files of the owner's, until one gets number FD
        files = globals().setdefault("files", [])
        while len(files) < 64 and (not files or files[-1].fileno() != int(args[1])):
            files.append(open(args[0], "ab"))
        print(files[-1].fileno(), flush=True)
"""


#: Command-line markers of what these tests start: services, watchdogs, owners and their forks.
_STARTED_HERE = (b"sleep\x00", b"sh\x00-c", b"_watchdog.py", b"json.loads(line)")


class _Owner:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _OWNER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.pids: list[int] = []

    def ask(self, *command: object) -> int:
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        answer = int(self.proc.stdout.readline())
        if command[0] in ("guard", "fork", "watchdog"):
            self.pids.append(answer)
        return answer

    def guard(self, *argv: str, grace: float = 10.0) -> int:
        return self.ask("guard", grace, *argv)

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)
        self.proc.stdin.close()
        self.proc.stdout.close()
        for pid in self.pids:  # only what the test started: a pid may have been reused
            for p in [pid, *descendants(pid)]:
                if any(pid_alive(p, marker) for marker in _STARTED_HERE):
                    os.kill(p, signal.SIGKILL)


@pytest.fixture
def owner():
    owner = _Owner()
    yield owner
    owner.cleanup()


def test_the_service_of_a_killed_process_gets_its_polite_signal_first(owner, tmp_path):
    note = tmp_path / "signal"
    service = owner.guard("sh", "-c", f"trap 'echo TERM > {note}; exit 0' TERM; sleep 600 & wait")
    watchdog = owner.ask("watchdog")
    wait_until(lambda: descendants(service), 20, "the service's sleep")
    owner.proc.kill()  # SIGKILL: no clean-up in the owner
    wait_until(lambda: not pid_alive(service), 20, "the guarded service still runs")
    assert note.read_text().strip() == "TERM"  # its trap ran: SIGTERM came first
    wait_until(lambda: not pid_alive(watchdog), 20, "the watchdog did not exit")


def test_a_service_that_ignores_sigterm_gets_sigkill_after_its_grace(owner):
    ignoring = ["sh", "-c", "trap '' TERM; exec sleep 600"]  # ignored signals survive exec
    service = owner.guard(*ignoring, grace=0.5)
    wait_until(lambda: pid_alive(service, b"sleep\x00600"), 20, "the service's exec of sleep")
    owner.proc.stdin.close()  # the owner exits normally, leaving its service running
    owner.proc.wait(timeout=30)
    wait_until(lambda: not pid_alive(service), 20, "the SIGTERM-proof service still runs")


def test_a_group_whose_leader_exits_first_is_killed_after_its_grace(owner):
    # as the crash harness's app: the Python leader dies on SIGTERM, its JVM stays in the group
    both = "(trap '' TERM; exec sleep 601) & exec sleep 600"
    leader = owner.guard("sh", "-c", both, grace=0.5)
    member = wait_until(
        lambda: [p for p in descendants(leader) if pid_alive(p, b"sleep\x00601")], 20, "the member"
    )[0]
    owner.pids.append(member)
    wait_until(lambda: pid_alive(leader, b"sleep\x00600"), 20, "the leader's exec of sleep")
    owner.proc.kill()
    wait_until(lambda: not pid_alive(leader), 20, "the group's leader still runs")
    wait_until(lambda: not pid_alive(member), 20, "the member that ignores SIGTERM still runs")


def test_a_released_service_is_left_running(owner):
    service = owner.guard("sleep", "600")
    owner.ask("release", service)
    watchdog = owner.ask("watchdog")
    owner.proc.kill()
    wait_until(lambda: not pid_alive(watchdog), 20, "the watchdog did not exit")
    assert pid_alive(service), "the watchdog stopped a released service"


def test_a_forked_child_does_not_delay_the_stop(owner):
    service = owner.guard("sleep", "600")
    child = owner.ask("fork")
    owner.proc.kill()
    wait_until(lambda: not pid_alive(service), 20, "the service runs while the fork lives")
    assert pid_alive(child)


def test_a_replaced_watchdog_is_told_of_the_services_guarded_before(owner):
    first = owner.guard("sleep", "600")
    watchdog = owner.ask("watchdog")
    os.kill(watchdog, signal.SIGKILL)
    wait_until(lambda: not pid_alive(watchdog), 20, "the watchdog survived SIGKILL")
    second = owner.guard("sleep", "600")  # meets the dead watchdog: a new one takes both
    assert owner.ask("watchdog") != watchdog
    owner.proc.kill()
    wait_until(
        lambda: not pid_alive(first) and not pid_alive(second),
        20,
        lambda: f"still running: {[p for p in (first, second) if pid_alive(p)]}",
    )


def test_a_release_that_meets_a_dead_watchdog_leaves_no_stale_pipe(owner, tmp_path):
    # the dead watchdog's pipe is closed; its descriptor number goes to the next file opened,
    # which a stale channel would then write its lines into
    first = owner.guard("sleep", "600")
    watchdog, pipe = owner.ask("watchdog"), owner.ask("pipe")
    os.kill(watchdog, signal.SIGKILL)
    wait_until(lambda: not pid_alive(watchdog), 20, "the watchdog survived SIGKILL")
    owner.ask("release", first)
    victim = tmp_path / "victim"
    assert owner.ask("open", str(victim), pipe) == pipe  # the number is free again
    second = owner.guard("sleep", "600")
    owner.proc.kill()
    wait_until(lambda: not pid_alive(second), 20, "the service guarded after it still runs")
    assert victim.read_bytes() == b"", "a guard line went into the owner's file"
    assert pid_alive(first), "the released service was stopped"


def test_pids_0_and_1_are_never_guarded():
    _watchdog.guard(0)
    _watchdog.guard(1)
    assert 0 not in _watchdog._guarded and 1 not in _watchdog._guarded


def test_a_reused_pid_is_left_alone():
    me = os.getpid()
    assert _watchdog._running(me, _watchdog._start_time(me))
    assert not _watchdog._running(me, "1")  # the pid of a process that started at another time
    assert not _watchdog._running(2**22 + 1, "-")  # no such process
