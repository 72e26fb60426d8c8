"""Running one application in the foreground: what ``streamtable run`` and ``serve`` do.

Stopping follows Kafka Streams' clean shutdown (``KafkaStreams#close(Duration)`` from a
shutdown hook): on Ctrl-C (SIGINT) or SIGTERM the running micro-batch is allowed to finish and
commit, every query stops, and the process exits 0 — within ``shutdown_timeout``. A batch
still running at the deadline is interrupted; its input is processed again by the next run
(exactly once under ``exactly_once_v2``), as when Kafka Streams' close times out.
"""

from __future__ import annotations

import datetime
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["run_in_foreground", "sigterm_exits"]

log = logging.getLogger("streamtable")


@contextmanager
def _stop_signals(stop: threading.Event, received: list[str]) -> Iterator[None]:
    """SIGINT and SIGTERM set ``stop`` (and record their name) while the block runs.

    The handlers only set an event: raising from a signal handler could interrupt a call into
    the Spark JVM half-way.
    """

    def handler(signum: int, _frame: Any) -> None:
        received.append(signal.Signals(signum).name)
        stop.set()

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def run_in_foreground(
    app: Any,
    *,
    until_caught_up: bool,
    shutdown_timeout: datetime.timedelta,
    echo: Callable[[str], None],
    on_tick: Callable[[], None] | None = None,
) -> bool:
    """Run the started ``app`` until it fails, catches up, or a stop signal arrives; close it.

    Parameters
    ----------
    app : KafkaStreams
        A started application.
    until_caught_up : bool
        Return once the input present at start is processed and committed.
    shutdown_timeout : datetime.timedelta
        The deadline of the clean close after a stop signal (``KafkaStreams.close(timeout)``).
    echo : callable
        Prints one line for the user.
    on_tick : callable, optional
        Called about every 0.5 s while the app runs (the progress display); what it raises is
        logged and ignored.

    Returns
    -------
    bool
        True when every query stopped within ``shutdown_timeout``.

    Raises
    ------
    StreamsError
        If the application failed (state ``ERROR``); it is closed first.
    """
    stop = threading.Event()
    received: list[str] = []
    failure: list[BaseException] = []
    finished = threading.Event()

    def wait_for_app() -> None:
        try:
            if until_caught_up:
                app.await_caught_up(timeout=datetime.timedelta(hours=24))
            else:
                while app.state.value == "RUNNING" and not stop.wait(0.5):
                    pass
                if app.state.value == "ERROR":
                    app.await_caught_up(timeout=datetime.timedelta(seconds=1))  # raises
        except BaseException as exc:  # handed to the main thread
            failure.append(exc)
        finally:
            finished.set()

    try:
        with _stop_signals(stop, received):
            threading.Thread(target=wait_for_app, name="streamtable-run", daemon=True).start()
            while not finished.wait(0.5) and not stop.is_set():
                if on_tick is not None:
                    try:
                        on_tick()
                    except Exception:  # progress display only: never stops the app
                        log.debug("progress display failed", exc_info=True)
            if received:
                echo(
                    f"{received[0]}: letting the running micro-batch commit, then stopping "
                    f"(at most {shutdown_timeout.total_seconds():g} s)"
                )
    finally:
        stop.set()
        started = time.monotonic()
        # a second signal during the close must not leave the queries half-stopped
        with _ignored(signal.SIGTERM), _ignored(signal.SIGINT):
            clean = bool(app.close(timeout=shutdown_timeout))
    if received:
        took = time.monotonic() - started
        echo(
            f"stopped in {took:.1f} s"
            + ("" if clean else "; a micro-batch was interrupted and will be redone on restart")
        )
    elif failure:
        raise failure[0]
    return clean


@contextmanager
def _ignored(signum: int) -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signum, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signum, previous)


#: The exit status of a JVM, and so of a Kafka Streams application, that SIGTERM stopped.
SIGTERM_EXIT_STATUS = 128 + signal.SIGTERM


@contextmanager
def sigterm_exits() -> Iterator[None]:
    """While the block runs, SIGTERM raises ``SystemExit(143)`` in the main thread, so that its
    ``finally`` blocks and context managers run, as on Ctrl-C (Python's own SIGTERM ends the
    process at once).

    For commands that start services of their own (a demo's embedded broker, PostgreSQL, Kafka
    Connect): those run in their own process groups and would outlive a terminated process.
    Once SIGTERM has arrived, further SIGTERMs are ignored until the process exits (its
    ``atexit`` hooks, which stop what is left, included), as a JVM ignores them while its
    shutdown hooks run. Without a SIGTERM the previous handler is restored after the block.
    Does nothing outside the main thread.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired = False

    def handler(_signum: int, _frame: Any) -> None:
        nonlocal fired
        fired = True
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise SystemExit(SIGTERM_EXIT_STATUS)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        if not fired:
            signal.signal(signal.SIGTERM, previous)
