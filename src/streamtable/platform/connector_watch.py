"""Watching the Kafka Connect connectors an application depends on.

An application whose tables come from change data capture silently goes stale when its source
connector fails: the topics stop changing and nothing in the application errs. With
``streamtable.connect.url`` and ``streamtable.connect.connectors`` set, :class:`KafkaStreams`
polls each connector's status (Kafka Connect's ``GET /connectors/<name>/status``) and, when the
connector or one of its tasks is ``FAILED``, fails the application with an error naming the
connector, the first line of its Java trace and the command that restarts it — the client state
becomes ``ERROR``, as for a failed query. A Connect REST API that does not answer is only logged
(a worker restart is not the connector's failure).
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any

__all__ = ["ConnectorWatch", "failure_of"]

log = logging.getLogger("streamtable")

#: Seconds between two polls of the connectors' status.
POLL_INTERVAL_S = 2.0


def failure_of(name: str, status: dict[str, Any], url: str) -> str | None:
    r"""The message for a ``FAILED`` connector or task in ``status``, else ``None``.

    Examples
    --------
    >>> ok = {"connector": {"state": "RUNNING"}, "tasks": [{"id": 0, "state": "RUNNING"}]}
    >>> failure_of("players", ok, "http://127.0.0.1:8083") is None
    True
    >>> bad = {"connector": {"state": "RUNNING"},
    ...        "tasks": [{"id": 0, "state": "FAILED", "trace": "io.Ex: slot in use\n\tat x"}]}
    >>> print(failure_of("players", bad, "http://127.0.0.1:8083"))
    Kafka Connect connector 'players' task 0 is FAILED: io.Ex: slot in use. The topics it ...
    """
    parts = [("", status.get("connector") or {})]
    parts += [(f" task {t.get('id')}", t) for t in status.get("tasks") or []]
    for what, part in parts:
        if part.get("state") == "FAILED":
            trace = (part.get("trace") or "no trace").strip().splitlines()[0]
            return (
                f"Kafka Connect connector {name!r}{what} is FAILED: {trace}. The topics it "
                "writes stop changing, so the tables read from them go stale. Fix the cause "
                f"(the full trace: `streamtable connect status` or GET {url}/connectors/"
                f"{name}/status), restart it (POST {url}/connectors/{name}/restart?"
                "includeTasks=true), then restart the application."
            )
    return None


class ConnectorWatch:
    """Polls Kafka Connect's REST API at ``url`` for the status of ``connectors``.

    Parameters
    ----------
    url : str
        Kafka Connect's REST API, e.g. ``http://127.0.0.1:8083``.
    connectors : sequence of str
        The connectors to watch.
    interval_s : float
        Least seconds between two polls (:data:`POLL_INTERVAL_S`).
    """

    def __init__(
        self, url: str, connectors: Sequence[str], interval_s: float = POLL_INTERVAL_S
    ) -> None:
        self.url = url.rstrip("/")
        self.connectors = tuple(connectors)
        self._interval = interval_s
        self._next = 0.0
        self._unreachable_logged = False

    def poll(self) -> str | None:
        """The failure message of the first ``FAILED`` connector, or ``None``; polls at most
        every ``interval_s`` (earlier calls return ``None`` at once).
        """
        now = time.monotonic()
        if now < self._next:
            return None
        self._next = now + self._interval
        for name in self.connectors:
            status = self._status(name)
            if status is not None:
                failure = failure_of(name, status, self.url)
                if failure is not None:
                    return failure
        return None

    def _status(self, name: str) -> dict[str, Any] | None:
        path = f"{self.url}/connectors/{urllib.parse.quote(name, safe='')}/status"
        try:
            with urllib.request.urlopen(path, timeout=5) as resp:
                self._unreachable_logged = False
                return dict(json.loads(resp.read()))
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return {
                    "connector": {
                        "state": "FAILED",
                        "trace": "no such connector on this Kafka Connect (HTTP 404)",
                    }
                }
            self._log_unreachable(f"HTTP {e.code}")
        except (OSError, ValueError) as e:
            self._log_unreachable(str(e))
        return None

    def _log_unreachable(self, reason: str) -> None:
        if not self._unreachable_logged:
            log.warning("streamtable: Kafka Connect at %s does not answer (%s)", self.url, reason)
            self._unreachable_logged = True
