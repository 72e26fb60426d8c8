"""``streamtable run``'s foreground loop: SIGTERM/SIGINT close the app cleanly (no JVM)."""

from __future__ import annotations

import datetime
import os
import signal
import threading

import pytest

from streamtable._app_runner import run_in_foreground
from streamtable.errors import StreamsError

pytestmark = pytest.mark.unit


class _State:
    def __init__(self, value: str) -> None:
        self.value = value


class FakeApp:
    """Stands in for a started KafkaStreams: RUNNING until closed (or told to fail)."""

    def __init__(self, fail_with: BaseException | None = None) -> None:
        self.running = threading.Event()
        self.closed_with: list[datetime.timedelta | None] = []
        self.fail_with = fail_with
        self._state = "RUNNING" if fail_with is None else "ERROR"

    @property
    def state(self) -> _State:
        self.running.set()
        return _State(self._state)

    def await_caught_up(self, timeout: datetime.timedelta) -> None:
        self.running.set()
        if self.fail_with is not None:
            raise self.fail_with
        threading.Event().wait(timeout.total_seconds())

    def close(self, timeout: datetime.timedelta | None = None) -> bool:
        self.closed_with.append(timeout)
        if self._state != "ERROR":  # ERROR stays, as with KafkaStreams.close()
            self._state = "NOT_RUNNING"
        return True


def _signal_when_running(app: FakeApp, signum: int) -> threading.Thread:
    def send() -> None:
        assert app.running.wait(10)
        os.kill(os.getpid(), signum)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.parametrize("until_caught_up", [False, True])
def test_a_stop_signal_closes_the_app_within_the_shutdown_timeout(signum, until_caught_up):
    app = FakeApp()
    lines: list[str] = []
    previous = signal.getsignal(signum)
    sender = _signal_when_running(app, signum)
    clean = run_in_foreground(
        app,
        until_caught_up=until_caught_up,
        shutdown_timeout=datetime.timedelta(seconds=7),
        echo=lines.append,
    )
    sender.join(5)
    assert clean is True
    assert app.closed_with == [datetime.timedelta(seconds=7)]
    name = signal.Signals(signum).name
    assert lines[0] == (
        f"{name}: letting the running micro-batch commit, then stopping (at most 7 s)"
    )
    assert lines[1].startswith("stopped in ")
    # the handlers are restored afterwards
    assert signal.getsignal(signum) == previous


def test_a_failed_app_is_closed_then_its_error_raised():
    app = FakeApp(fail_with=StreamsError("Application 'a' failed: boom"))
    with pytest.raises(StreamsError, match="Application 'a' failed: boom"):
        run_in_foreground(
            app,
            until_caught_up=False,
            shutdown_timeout=datetime.timedelta(seconds=3),
            echo=lambda line: None,
        )
    assert app.closed_with == [datetime.timedelta(seconds=3)]
