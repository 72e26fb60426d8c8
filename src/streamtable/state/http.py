"""Interactive queries over HTTP: a small JSON service over an application's queryable stores.

Kafka Streams leaves the transport of interactive queries to the application and names the
address where an instance answers them ``application.server``. streamtable serves them itself
when that key is set: ``KafkaStreams.start()`` runs :class:`QueryServer` (FastAPI on uvicorn, in
a daemon thread) on that address, and ``close()`` stops it. :func:`create_app` builds the
service over anything shaped like :class:`QueryableStreams`.

Endpoints (every answer is JSON; see ``docs/interactive-queries.md``, "Over HTTP"):

- ``GET /stores``: each queryable store's name, kind, key and value serde, number of entries
  and position;
- ``GET /stores/{name}/keys/{key}``: one value (404 when the key is absent);
- ``GET /stores/{name}/range?from=&to=&reverse=&limit=``, ``GET /stores/{name}/all?reverse=&limit=``
  and ``GET /stores/{name}/prefix/{prefix}?limit=``: entries in serialized-key order;
- ``GET /stores/{name}/windows/{key}?from=&to=``: a window store's windows of one key starting
  in ``[from, to]`` (ms; an inverted range is 400); ``GET /stores/{name}/sessions/{key}``: a
  session store's sessions of one key;
- ``GET /metadata``: this instance's ``application.server``, ``application.id``, state, stores and
  the source partitions each store covers (every partition is local for now);
- ``GET /docs``: the OpenAPI page (FastAPI's).

Rules:

- Keys in a URL are text. A store with ``String`` keys takes it as is; ``Long`` and ``Integer``
  keys are parsed as decimal integers (400 otherwise); keys of other serdes cannot be given in
  a URL (400).
- Values and keys are rendered as JSON: ``None``, booleans, numbers, strings, lists and dicts
  as themselves (a dict's non-string keys by their ``repr``); ``bytes`` as base64 text; a float
  NaN or infinity as the string ``"NaN"``, ``"Infinity"`` or ``"-Infinity"``; any other object
  (a dataclass, a ``datetime``...) by its ``repr``.
- Every store answer carries the store's ``position`` (``{topic: {partition: offset}}``), read
  before the data: the answer reflects at least that position. ``min_position=topic:partition:
  offset[,...]`` with ``timeout_ms`` (default 0, at most 300000) waits for the store to reach
  that position first, as a query with an IQv2 ``PositionBound``; if it does not in time, the
  answer is **504** with the position reached.
- Errors are ``{"error": "<message>"}`` with a 4xx status: 400 for a bad parameter or key,
  401 without the right bearer token, 404 for an unknown store, key or route. Conditions of
  the application rather than the request are 5xx, also with a message and never a stack
  trace: 503 when the application is not ``RUNNING`` or its stores' replica failed, 504 when
  ``min_position`` was not reached within ``timeout_ms``, 500 for an unexpected error (logged
  by the ``streamtable`` logger).
- An inverted range (``from`` after ``to``) returns no entries, as Kafka Streams' ``range``.
- With a token, every request (``/docs`` too) must carry ``Authorization: Bearer <token>``.
"""

from __future__ import annotations

import base64
import hmac
import logging
import math
import re
import socket
import threading
import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Annotated, Any, Protocol

from fastapi import FastAPI, Query
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request

from streamtable.config import StreamsConfig, split_host_port
from streamtable.errors import InvalidStateStoreException, StreamsError, StreamtableError
from streamtable.state.queries import (
    Position,
    PositionBound,
    QueryableStoreTypes,
    ReadOnlyKeyValueStore,
    ReplicaView,
    StoreQueryParameters,
)

__all__ = ["QueryServer", "QueryableStreams", "create_app", "parse_position", "to_json"]

log = logging.getLogger("streamtable")

#: Entries a scan returns when the request gives no ``limit``; the largest ``limit`` accepted.
DEFAULT_LIMIT = 1000
MAX_LIMIT = 100_000
#: The longest wait for a position a request may ask for (``timeout_ms``).
MAX_TIMEOUT_MS = 300_000

_INT = re.compile(r"[-+]?[0-9]+")

# query parameters shared by the endpoints
_MinPosition = Annotated[
    str | None,
    Query(description="Wait until the store reflects these offsets: topic:partition:offset[,...]"),
]
_TimeoutMs = Annotated[
    int, Query(ge=0, le=MAX_TIMEOUT_MS, description="How long to wait for min_position (ms)")
]
_Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT, description="At most this many entries")]
_Reverse = Annotated[bool, Query(description="Descending key order")]


class QueryableStreams(Protocol):
    """What the HTTP service needs of an application (``KafkaStreams`` has it)."""

    @property
    def config(self) -> StreamsConfig:
        """The application's configuration (``application.id``, ``application.server``)."""
        ...

    @property
    def state(self) -> Any:
        """The client state (an enum whose ``value`` is the name, or the name)."""
        ...

    def store(self, parameters: StoreQueryParameters) -> Any:
        """A read-only view of a queryable store (``KafkaStreams.store``)."""
        ...

    def queryable_stores(self) -> dict[str, str]:
        """Name -> kind (``"key_value"``, ``"window"``, ``"session"``) of each queryable
        store.
        """
        ...


class _QueryError(Exception):
    """An answer other than 200: ``status`` and ``{"error": message, **extra}``."""

    def __init__(self, status: int, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.extra = extra


def _error(status: int, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=status)


# -- rendering ------------------------------------------------------------------------------


def to_json(value: Any) -> Any:
    r"""``value`` as JSON data (the rules in the module docstring).

    >>> to_json({"n": 1, "raw": b"\x00\xff", "xs": (1.5, float("nan"))})
    {'n': 1, 'raw': 'AP8=', 'xs': [1.5, 'NaN']}
    >>> import datetime
    >>> to_json(datetime.date(2024, 1, 31))
    'datetime.date(2024, 1, 31)'
    """
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, Mapping):
        return {k if isinstance(k, str) else repr(k): to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    return repr(value)


def _position_json(position: Mapping[tuple[str, int], int]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(position.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return out


def parse_position(text: str) -> Position:
    """A :class:`Position` from ``topic:partition:offset[,topic:partition:offset...]``.

    Raises
    ------
    ValueError
        For any other text; the message shows the expected form.

    Examples
    --------
    >>> parse_position("clicks:0:41,clicks:1:7")
    Position({('clicks', 0): 41, ('clicks', 1): 7})
    """
    position = Position.empty()
    for part in text.split(","):
        topic, _, rest = part.strip().partition(":")
        partition, _, offset = rest.partition(":")
        if not topic or not partition.isdigit() or not offset.isdigit():
            raise ValueError(
                f"min_position expects 'topic:partition:offset[,...]' with partition and "
                f"offset >= 0, got {text!r} (entry {part!r})"
            )
        position = position.with_component(topic, int(partition), int(offset))
    return position


# -- the application ------------------------------------------------------------------------


def create_app(streams: QueryableStreams, *, token: str | None = None) -> FastAPI:
    """The FastAPI application serving ``streams``' queryable stores.

    Parameters
    ----------
    streams : QueryableStreams
        A ``KafkaStreams`` instance (or anything with ``config``, ``state``, ``store()`` and
        ``queryable_stores()``).
    token : str, optional
        When given, every request must carry ``Authorization: Bearer <token>``; others get
        401 with a JSON message.

    Returns
    -------
    FastAPI
        Serve it with any ASGI server; ``KafkaStreams`` does so with :class:`QueryServer`.
    """
    cfg = streams.config
    app = FastAPI(
        title=f"streamtable interactive queries: {cfg.application_id}",
        description=(
            "Read-only queries of the application's queryable stores (Kafka Streams' "
            "interactive queries). Errors are JSON objects with an `error` message."
        ),
        version=_version(),
    )

    @app.exception_handler(RequestValidationError)
    async def _bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = []
        for e in exc.errors():
            where = ".".join(str(p) for p in e.get("loc", ()) if p not in ("query", "path"))
            problems.append(f"{where}: {e.get('msg')} (got {e.get('input')!r})")
        return _error(400, "Invalid request parameter: " + "; ".join(problems))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = str(exc.detail)
        if exc.status_code == 404:
            message = f"No such endpoint: {request.method} {request.url.path} (see /docs)."
        elif exc.status_code == 405:
            message = f"{request.method} is not allowed on {request.url.path}; use GET."
        return _error(exc.status_code, message)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:  # pragma: no cover
        log.error("streamtable: HTTP query %s failed: %r", request.url.path, exc)
        return _error(500, f"Internal error: {type(exc).__name__}: {exc}")

    if token is not None:
        app.add_middleware(_BearerAuth, token=token)

    def answer(fn: Callable[[], Any]) -> JSONResponse:
        """Run ``fn`` and turn its result or its error into a JSON answer."""
        try:
            return JSONResponse(fn())
        except _QueryError as e:
            return _error(e.status, e.message, **e.extra)
        except (InvalidStateStoreException, StreamsError) as e:  # not RUNNING; replica failed
            return _error(503, str(e))
        except StreamtableError as e:
            log.error("streamtable: HTTP query failed: %s", e)
            return _error(500, f"{type(e).__name__}: {e}")
        except Exception as e:
            log.exception("streamtable: HTTP query failed")
            return _error(500, f"Internal error: {type(e).__name__}: {e}")

    def open_store(name: str, kind: str = "key_value") -> Any:
        stores = streams.queryable_stores()
        if name not in stores:
            raise _QueryError(
                404,
                f"No queryable store {name!r}; the queryable stores are {sorted(stores)} "
                "(GET /stores).",
            )
        if stores[name] != kind:
            routes = {
                "key_value": "/keys, /range, /all, /prefix",
                "window": "/windows/{key}",
                "session": "/sessions/{key}",
            }
            raise _QueryError(
                400,
                f"Store {name!r} is a {stores[name].replace('_', '-')} store; query it with "
                f"GET /stores/{name}{routes[stores[name]]}.",
            )
        types = {
            "key_value": QueryableStoreTypes.key_value_store(),
            "window": QueryableStoreTypes.window_store(),
            "session": QueryableStoreTypes.session_store(),
        }
        return streams.store(StoreQueryParameters.from_name_and_type(name, types[kind]))

    def read(
        name: str,
        min_position: str | None,
        timeout_ms: int,
        fn: Callable[[Any], dict[str, Any]],
        kind: str = "key_value",
    ) -> Callable[[], dict[str, Any]]:
        def run() -> dict[str, Any]:
            store = open_store(name, kind)
            _wait(store, min_position, timeout_ms)
            position = store.position()  # before the data: the answer reflects at least it
            try:
                body = fn(store)
            except _QueryError as e:
                if e.status == 404:  # an absent key: at this position
                    e.extra["position"] = _position_json(position)
                raise
            return {"store": name, **body, "position": _position_json(position)}

        return run

    def scan_body(pairs: list[tuple[Any, Any]], limit: int) -> dict[str, Any]:
        return {
            "entries": [{"key": to_json(k), "value": to_json(v)} for k, v in pairs[:limit]],
            "more": len(pairs) > limit,
        }

    @app.get("/stores")
    def list_stores() -> JSONResponse:
        """Every queryable store: kind, serdes, number of entries and position."""

        def run() -> dict[str, Any]:
            out = []
            for name, kind in sorted(streams.queryable_stores().items()):
                store = open_store(name, kind)
                position = store.position()
                # a key-value store's count (window and session stores have none in Kafka
                # Streams' API: null)
                count = getattr(store, "approximate_num_entries", None)
                out.append(
                    {
                        "name": name,
                        "kind": kind,
                        "key_serde": store.key_serde.name,
                        "value_serde": store.value_serde.name,
                        "approximate_num_entries": None if count is None else count(),
                        "position": _position_json(position),
                    }
                )
            return {"stores": out}

        return answer(run)

    @app.get("/stores/{name}/keys/{key:path}")
    def get_key(
        name: str,
        key: str,
        min_position: _MinPosition = None,
        timeout_ms: _TimeoutMs = 0,
    ) -> JSONResponse:
        """The value of one key (404 when the store holds no value for it)."""

        def body(store: ReadOnlyKeyValueStore) -> dict[str, Any]:
            k = _url_key(store, key, "key")
            value = store.get(k)
            if value is None:
                raise _QueryError(404, f"Store {name!r} has no value for key {key!r}.")
            return {"key": to_json(k), "value": to_json(value)}

        return answer(read(name, min_position, timeout_ms, body))

    @app.get("/stores/{name}/range")
    def get_range(
        name: str,
        from_: Annotated[str | None, Query(alias="from", description="Lowest key")] = None,
        to: Annotated[str | None, Query(description="Highest key")] = None,
        reverse: _Reverse = False,
        limit: _Limit = DEFAULT_LIMIT,
        min_position: _MinPosition = None,
        timeout_ms: _TimeoutMs = 0,
    ) -> JSONResponse:
        """Entries with ``from <= key <= to`` in serialized-key order (absent or empty: open).

        ``from`` after ``to`` gives no entries, as Kafka Streams' ``range``.
        """

        def body(store: ReadOnlyKeyValueStore) -> dict[str, Any]:
            lo = _url_key(store, from_, "from") if from_ else None
            hi = _url_key(store, to, "to") if to else None
            pairs = store.reverse_range(lo, hi) if reverse else store.range(lo, hi)
            return scan_body(pairs, limit)

        return answer(read(name, min_position, timeout_ms, body))

    @app.get("/stores/{name}/all")
    def get_all(
        name: str,
        reverse: _Reverse = False,
        limit: _Limit = DEFAULT_LIMIT,
        min_position: _MinPosition = None,
        timeout_ms: _TimeoutMs = 0,
    ) -> JSONResponse:
        """Every entry in serialized-key order, up to ``limit``."""

        def body(store: ReadOnlyKeyValueStore) -> dict[str, Any]:
            return scan_body(store.reverse_all() if reverse else store.all(), limit)

        return answer(read(name, min_position, timeout_ms, body))

    @app.get("/stores/{name}/prefix/{prefix:path}")
    def get_prefix(
        name: str,
        prefix: str,
        limit: _Limit = DEFAULT_LIMIT,
        min_position: _MinPosition = None,
        timeout_ms: _TimeoutMs = 0,
    ) -> JSONResponse:
        """Entries whose key starts with ``prefix`` (stores with String keys only)."""

        def body(store: ReadOnlyKeyValueStore) -> dict[str, Any]:
            if store.key_serde.kind != "string":
                raise _QueryError(
                    400,
                    f"Store {name!r} has {store.key_serde.name} keys: prefix scans over HTTP "
                    "need a store with String keys.",
                )
            return scan_body(store.prefix_scan(prefix), limit)

        return answer(read(name, min_position, timeout_ms, body))

    @app.get("/stores/{name}/windows/{key:path}")
    def get_windows(
        name: str,
        key: str,
        from_: Annotated[int, Query(alias="from", description="Earliest window start (ms)")] = 0,
        to: Annotated[int, Query(description="Latest window start (ms)")] = (1 << 63) - 1,
        min_position: _MinPosition = None,
        timeout_ms: _TimeoutMs = 0,
    ) -> JSONResponse:
        """The windows of one key of a window store starting in ``[from, to]`` (ms)."""

        def body(store: Any) -> dict[str, Any]:
            k = _url_key(store, key, "key")
            if from_ > to:
                raise _QueryError(400, f"Inverted time range: from={from_} is after to={to}.")
            windows = store.fetch(k, from_, to)
            size = store.window_size_ms
            return {
                "key": to_json(k),
                "windows": [{"start": s, "end": s + size, "value": to_json(v)} for s, v in windows],
            }

        return answer(read(name, min_position, timeout_ms, body, "window"))

    @app.get("/stores/{name}/sessions/{key:path}")
    def get_sessions(
        name: str,
        key: str,
        min_position: _MinPosition = None,
        timeout_ms: _TimeoutMs = 0,
    ) -> JSONResponse:
        """The sessions of one key of a session store."""

        def body(store: Any) -> dict[str, Any]:
            k = _url_key(store, key, "key")
            return {
                "key": to_json(k),
                "sessions": [
                    {"start": w.start, "end": w.end, "value": to_json(v)} for w, v in store.fetch(k)
                ],
            }

        return answer(read(name, min_position, timeout_ms, body, "session"))

    @app.get("/metadata")
    def metadata() -> JSONResponse:
        """Address, application id, state and stores of this instance, and the source
        partitions each store covers (this instance holds every partition of every store).
        """

        def run() -> dict[str, Any]:
            state = streams.state
            stores = []
            covered: set[tuple[str, int]] = set()
            for name, kind in sorted(streams.queryable_stores().items()):
                try:
                    partitions = sorted(open_store(name, kind).position())
                except (InvalidStateStoreException, StreamsError):
                    partitions = []  # not RUNNING, or the replica failed: nothing known
                covered.update(partitions)
                stores.append(
                    {
                        "name": name,
                        "kind": kind,
                        "source_partitions": [{"topic": t, "partition": p} for t, p in partitions],
                    }
                )
            return {
                "application_id": cfg.application_id,
                "application_server": cfg.application_server,
                "state": getattr(state, "value", state),
                "stores": stores,
                "topic_partitions": [{"topic": t, "partition": p} for t, p in sorted(covered)],
            }

        return answer(run)

    return app


def _wait(store: ReplicaView, min_position: str | None, timeout_ms: int) -> None:
    if not min_position:
        return
    try:
        bound = PositionBound.at(parse_position(min_position))
    except ValueError as e:
        raise _QueryError(400, str(e)) from None
    try:
        store.wait_for(bound, timeout=timedelta(milliseconds=timeout_ms))
    except StreamsError as e:
        reached = store.position()  # raises too if the replica failed (then: 503)
        raise _QueryError(504, str(e), position=_position_json(reached)) from None


def _url_key(store: ReplicaView, text: str, what: str) -> Any:
    """The store key that URL text ``text`` stands for (the rules in the module docstring)."""
    serde = store.key_serde
    if serde.kind == "string":
        key: Any = text
    elif serde.kind in ("long", "integer"):
        if not _INT.fullmatch(text):
            raise _QueryError(
                400,
                f"Store {store.name!r} has {serde.name} keys: {what} {text!r} is not an integer.",
            )
        key = int(text)
    else:
        raise _QueryError(
            400,
            f"Keys of store {store.name!r} ({serde.name} serde) cannot be given in a URL: only "
            "stores with String, Long or Integer keys are queried by key over HTTP. Query it "
            "in Python with KafkaStreams.store(), or use /all.",
        )
    try:
        serde.serialize(key)
    except Exception as e:
        raise _QueryError(
            400, f"Store {store.name!r}: {what} {text!r} is not a valid {serde.name} key: {e}"
        ) from None
    return key


class _BearerAuth:
    """ASGI middleware: every HTTP request must carry ``Authorization: Bearer <token>``."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self._token = token.encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        header = dict(scope.get("headers") or []).get(b"authorization")
        if header is None:
            message = (
                "This query service requires a bearer token: send 'Authorization: Bearer "
                "<token>' (the application's streamtable.query.token)."
            )
        else:
            scheme, _, given = header.partition(b" ")
            if scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), self._token):
                await self.app(scope, receive, send)
                return
            message = "Invalid credentials: expected 'Authorization: Bearer <token>'."
        response = JSONResponse(
            {"error": message}, status_code=401, headers={"WWW-Authenticate": "Bearer"}
        )
        await response(scope, receive, send)


def _version() -> str:
    from streamtable import __version__

    return __version__


# -- the server -----------------------------------------------------------------------------


class QueryServer:
    """The HTTP query service of an application, served by uvicorn in a daemon thread.

    :meth:`bind` takes the address, so that a busy port fails before the application starts
    its queries (connections made until :meth:`start` wait in the listen backlog and are
    answered once it serves), :meth:`start` serves, :meth:`stop` stops and frees the address.
    ``KafkaStreams`` does all three when ``application.server`` is set.

    Parameters
    ----------
    streams : QueryableStreams
        The application to serve.
    address : str
        ``host:port`` (``application.server``).
    token : str, optional
        The bearer token every request must carry (``streamtable.query.token``).
    """

    def __init__(self, streams: QueryableStreams, address: str, *, token: str | None = None):
        self.address = address
        self.host, self.port = split_host_port(address)
        self.app = create_app(streams, token=token)
        self._socket: socket.socket | None = None
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def bind(self) -> None:
        """Take the address (listening, not answering yet).

        Raises
        ------
        StreamsError
            When the address cannot be bound (in use, not an address of this machine).
        """
        try:
            family = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)[0][0]
            # proto IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on accepted sockets whose
            # proto says TCP; without it Nagle and delayed ACKs add ~40 ms to every answer
            sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past TIME_WAIT
            try:
                sock.bind((self.host, self.port))
                sock.listen(128)  # holds the port: a second bind fails even with SO_REUSEADDR
            except BaseException:
                sock.close()
                raise
        except OSError as e:
            raise StreamsError(
                f"Cannot serve interactive queries on application.server={self.address!r}: "
                f"{e}. Choose a free port on an address of this machine."
            ) from e
        self._socket = sock

    def start(self, timeout: timedelta = timedelta(seconds=30)) -> None:
        """Serve on the bound address (binding it first if needed) until :meth:`stop`.

        Raises
        ------
        StreamsError
            When the server did not start within ``timeout``.
        """
        import uvicorn

        if self._socket is None:
            self.bind()
        config = uvicorn.Config(
            self.app,
            log_config=None,
            access_log=False,
            lifespan="off",
            log_level="warning",
            timeout_graceful_shutdown=5,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run,
            kwargs={"sockets": [self._socket]},
            name="streamtable-query-server",
            daemon=True,
        )
        self._thread.start()
        deadline = time.monotonic() + timeout.total_seconds()
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise StreamsError(
                    f"The HTTP query service on {self.address!r} did not start (see the "
                    "'uvicorn.error' log)."
                )
            time.sleep(0.01)
        log.info("streamtable: serving interactive queries on http://%s", self.address)

    def stop(self, timeout: timedelta = timedelta(seconds=10)) -> None:
        """Stop serving and free the address (idempotent)."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout.total_seconds())
        if self._socket is not None:
            self._socket.close()
        self._server = self._thread = self._socket = None
