"""Running a user ``Processor`` for one task (source partition) and micro-batch (pure Python).

:class:`ProcessorSpec` is what the compiler knows of a ``KStream.process`` node;
:func:`run_page` runs one page: it creates a processor instance from the supplier, calls
``init`` with a :class:`PageContext` (rebinding the page's persisted punctuation schedules),
hands it the page's records in arrival order, fires the due punctuations (stream time, then
wall-clock time, each in schedule order, as Kafka Streams' task punctuates stream time first),
and calls ``close``. It returns the forwarded records, the store updates to log, and the
records skipped by the processing exception handler.

The Spark side (state I/O, timers, rows) is :mod:`.processor_api`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from streamtable._millis import duration_ms
from streamtable.compiler.codecs import Codec
from streamtable.compiler.paged.punctuation import STREAM_TIME, WALL_CLOCK_TIME, ScheduleState
from streamtable.compiler.paged.records import Out, Rec
from streamtable.errors import StreamsError
from streamtable.processor.api import Record, RecordMetadata
from streamtable.processor.stores import KeyValueStore
from streamtable.processor.window_stores import WindowBytesStoreSupplier, WindowStore
from streamtable.serde.base import Serde

log = logging.getLogger("streamtable")

#: Drop reason of records the processing exception handler skipped.
PROCESSING = "processing"

#: (partition, offset) of punctuation outputs: after any record's, so that the
#: TopologyTestDriver's output order puts them after the record that moved the clock, as
#: Kafka Streams punctuates after processing.
_AFTER_RECORDS = ((1 << 31) - 1, 1 << 62)


@dataclass(frozen=True)
class StoreSpec:
    """A connected store: name, serdes, whether its updates are logged, and for a window
    store its supplier (retention, window size).
    """

    name: str
    key_serde: Serde
    value_serde: Serde
    logged: bool
    window: WindowBytesStoreSupplier | None = None
    #: what ``persistent()`` answers: the supplier's (``persistent_*`` or ``in_memory_*``)
    persistent: bool = True

    @property
    def kind(self) -> str:
        """``"key_value"`` or ``"window"``."""
        return "key_value" if self.window is None else "window"


@dataclass(frozen=True)
class ProcessorSpec:
    """A ``KStream.process``/``process_values`` node as the operator runs it.

    Attributes
    ----------
    node_name : str
    supplier : callable
        Returns a new processor.
    stores : tuple of StoreSpec
    key_codec, value_codec : Codec
        How the input's key and value columns are encoded.
    out_key_codec, out_value_codec : Codec
        How forwarded keys and values are encoded.
    fixed_key : bool
        ``process_values``: forwarded records must keep the input key.
    application_id : str
    continue_on_error : bool
        ``processing.exception.handler`` is log-and-continue: a record (or punctuation) whose
        user code raises is skipped and counted; otherwise the application stops.
    """

    node_name: str
    supplier: Callable[[], Any]
    stores: tuple[StoreSpec, ...]
    key_codec: Codec
    value_codec: Codec
    out_key_codec: Codec
    out_value_codec: Codec
    fixed_key: bool
    application_id: str
    continue_on_error: bool = False


class _Cancellable:
    def __init__(self, schedule: ScheduleState) -> None:
        self._schedule = schedule

    def cancel(self) -> None:
        self._schedule.cancelled = True


@dataclass
class PageContext:
    """The ``ProcessorContext`` of one instance (see
    :class:`streamtable.processor.api.ProcessorContext` for the contract).
    """

    spec: ProcessorSpec
    #: the task: the source partition the instance processes
    page: int
    #: name -> the store's entries of this task (key bytes -> value bytes)
    load_store: Callable[[str], MutableMapping[bytes, bytes]]
    #: the persisted schedules (rebound by call order); ``None`` on the page's first run
    persisted: list[ScheduleState] | None
    stream_time: int | None
    wall_clock: int | None
    outputs: list[Out] = field(default_factory=list)
    schedules: list[tuple[ScheduleState, Callable[[int], None]]] = field(default_factory=list)
    opened: dict[str, Any] = field(default_factory=dict)
    #: store -> key bytes -> (value bytes or None, ts): updates to log
    changes: dict[str, dict[bytes, tuple[bytes | None, int]]] = field(default_factory=dict)
    in_init: bool = False
    current: Rec | None = None
    current_key: Any = None
    timestamp: int = 0
    _seq: int = 0

    # -- ProcessorContext ------------------------------------------------------------------

    def forward(self, record: Record, child_name: str | None = None) -> None:  # noqa: D102
        if not isinstance(record, Record):
            raise StreamsError(
                f"Processor {self.spec.node_name!r} forwarded {type(record).__name__} "
                f"{record!r}; forward a streamtable.Record (e.g. record.with_value(...))."
            )
        if child_name is not None:
            raise StreamsError(
                f"Processor {self.spec.node_name!r}: forward(record, {child_name!r}) to one "
                "named child is not supported; forward to all children."
            )
        rec = self.current
        if self.spec.fixed_key and rec is not None and record.key != self.current_key:
            raise StreamsError(
                f"Processor {self.spec.node_name!r} (process_values) forwarded key "
                f"{record.key!r} for input key {self.current_key!r}; a fixed-key processor "
                "cannot change keys (Kafka Streams' FixedKeyRecord has no withKey). Use "
                "KStream.process to change keys."
            )
        self._seq += 1
        key = self.spec.out_key_codec.encode_many([record.key])[0]
        if self.spec.fixed_key and rec is not None:
            key = rec.key
        value = self.spec.out_value_codec.encode_many([record.value])[0]
        if rec is not None:
            out = Out(
                key,
                value,
                None,
                int(record.timestamp),
                rec.topic,
                rec.partition,
                rec.offset,
                rec.seq * 1000 + self._seq,
            )
        else:
            out = Out(key, value, None, int(record.timestamp), None, *_AFTER_RECORDS, self._seq)
        self.outputs.append(out)

    def schedule(  # noqa: D102
        self, interval: timedelta, punctuation_type: Any, punctuator: Callable[[int], None]
    ) -> _Cancellable:
        if not self.in_init:
            raise StreamsError(
                f"Processor {self.spec.node_name!r} called schedule() outside init(): "
                "streamtable creates a processor instance per state page and micro-batch and "
                "restores schedules by the order of the schedule() calls in init(), so "
                "schedule punctuations in init() (cancel them with the returned handle)."
            )
        ms = _interval_ms(interval)
        kind = getattr(punctuation_type, "value", punctuation_type)
        if kind not in (STREAM_TIME, WALL_CLOCK_TIME):
            raise ValueError(
                f"schedule() needs a PunctuationType (STREAM_TIME or WALL_CLOCK_TIME); got "
                f"{punctuation_type!r}."
            )
        if not callable(punctuator):
            raise ValueError(
                f"schedule() needs a callable punctuator(timestamp); got {punctuator!r}."
            )
        i = len(self.schedules)
        old = self.persisted[i] if self.persisted is not None and i < len(self.persisted) else None
        if old is not None and old.kind == kind and old.interval_ms == ms:
            state = old
        else:
            state = ScheduleState.first(kind, ms, self.wall_clock)
        self.schedules.append((state, punctuator))
        return _Cancellable(state)

    def get_state_store(self, name: str) -> Any:  # noqa: D102
        store = self.opened.get(name)
        if store is not None:
            return store
        spec = next((s for s in self.spec.stores if s.name == name), None)
        if spec is None:
            raise StreamsError(
                f"Processor {self.spec.node_name!r} has no access to StateStore {name!r} as "
                "the store is not connected to the processor (Kafka Streams' message). Pass "
                f"its name to KStream.process(supplier, {name!r}); connected stores: "
                f"{[s.name for s in self.spec.stores]}."
            )
        store: Any
        if spec.window is not None:
            store = WindowStore(
                spec.window, self.load_store(name), spec.key_serde, spec.value_serde
            )
        else:
            store = KeyValueStore(
                name, self.load_store(name), spec.key_serde, spec.value_serde, spec.persistent
            )
        store.on_change = self._logger(name) if spec.logged else None
        self.opened[name] = store
        return store

    def _logger(self, name: str) -> Callable[[bytes, bytes | None], None]:
        changes = self.changes.setdefault(name, {})

        def log(key: bytes, value: bytes | None) -> None:
            changes[key] = (value, self.timestamp)

        return log

    def record_metadata(self) -> RecordMetadata | None:  # noqa: D102
        rec = self.current
        if rec is None:
            return None
        return RecordMetadata(rec.topic, rec.partition, rec.offset)

    def current_stream_time_ms(self) -> int:  # noqa: D102
        return -1 if self.stream_time is None else self.stream_time

    def current_system_time_ms(self) -> int:  # noqa: D102
        return -1 if self.wall_clock is None else self.wall_clock

    def application_id(self) -> str:  # noqa: D102
        return self.spec.application_id

    def task_id(self) -> str:  # noqa: D102
        return f"0_{self.page}"

    def app_configs(self) -> dict[str, Any]:
        """Not available to processors yet: an empty dict."""
        return {}

    def commit(self) -> None:
        """A request to commit: every micro-batch commits anyway."""


def _interval_ms(interval: Any) -> int:
    if isinstance(interval, timedelta):
        ms = duration_ms(interval)
    elif isinstance(interval, int):
        ms = interval
    else:
        raise ValueError(f"schedule() needs a timedelta interval; got {interval!r}.")
    if ms < 1:
        raise ValueError(
            f"The minimum supported scheduling interval is 1 millisecond; got {interval!r} "
            "(Kafka Streams' message)."
        )
    return ms


@dataclass
class PageResult:
    """What :func:`run_page` produced."""

    outputs: list[Out]
    changes: dict[str, dict[bytes, tuple[bytes | None, int]]]
    schedules: list[ScheduleState]
    #: records (or punctuations: ``None``) the processing exception handler skipped
    skipped: int = 0


def needs_run(
    records: list[Rec],
    schedules: list[ScheduleState] | None,
    stream_time: int | None,
    wall_clock: int | None,
) -> bool:
    """Whether the page must create a processor this micro-batch: it has records, has never
    run (its schedules are unknown), or a punctuation is due.
    """
    if records or schedules is None:
        return True
    return any(s.due_at(stream_time if s.kind == STREAM_TIME else wall_clock) for s in schedules)


def run_page(
    spec: ProcessorSpec,
    page: int,
    records: list[Rec],
    load_store: Callable[[str], MutableMapping[bytes, bytes]],
    schedules: list[ScheduleState] | None,
    stream_time_before: int | None,
    stream_time_after: int | None,
    wall_clock: int | None,
) -> PageResult:
    """Run one instance over ``records`` (arrival order, each with its ``stream_time``), then
    fire the due punctuations at ``stream_time_after`` and ``wall_clock``.

    Raises
    ------
    StreamsError
        When user code raises and the processing handler is log-and-fail (the message names
        the processor and the record), or on a misuse of the context.
    """
    ctx = PageContext(spec, page, load_store, schedules, stream_time_before, wall_clock)
    proc = spec.supplier()
    skipped = 0
    ctx.in_init = True
    try:
        _call(spec, "init", proc.init, ctx, where="in init()")
    finally:
        ctx.in_init = False
    if records:
        keys = spec.key_codec.decode_many([r.key for r in records])
        values = spec.value_codec.decode_many([r.value for r in records])
        for rec, key, value in zip(records, keys, values, strict=True):
            st = rec.stream_time if rec.stream_time is not None else rec.ts
            if ctx.stream_time is None or st > ctx.stream_time:
                ctx.stream_time = st
            ctx.current, ctx.current_key, ctx.timestamp = rec, key, rec.ts
            ctx._seq = 0
            where = f"on the record of {rec.topic}-{rec.partition}@{rec.offset} (key {key!r})"
            if not _call(spec, "process", proc.process, Record(key, value, rec.ts), where=where):
                skipped += 1
        ctx.current = None
    if stream_time_after is not None and (
        ctx.stream_time is None or stream_time_after > ctx.stream_time
    ):
        ctx.stream_time = stream_time_after
    ctx._seq = 0
    for kind, now in ((STREAM_TIME, ctx.stream_time), (WALL_CLOCK_TIME, wall_clock)):
        # the earliest due first, as Kafka Streams' PunctuationQueue (a priority queue by due
        # time); ties in the order of schedule()
        due = sorted(
            (sp for sp in ctx.schedules if sp[0].kind == kind and sp[0].due_at(now)),
            key=lambda sp: sp[0].next,
        )
        for state, punctuator in due:
            if not state.due_at(now):  # cancelled by a punctuator that fired before it
                continue
            assert now is not None
            ctx.timestamp = now
            state.fired(now)  # before the call, as Kafka Streams reschedules first
            where = f"in a {kind.replace('_', '-')} punctuation at {now}"
            if not _call(spec, "punctuator", punctuator, now, where=where):
                skipped += 1
    _call(spec, "close", proc.close, where="in close()")
    for store in ctx.opened.values():
        flush = getattr(store, "flush", None)
        if flush is not None:
            flush()
    return PageResult(ctx.outputs, ctx.changes, [s for s, _ in ctx.schedules], skipped)


def _call(spec: ProcessorSpec, what: str, fn: Callable[..., Any], *args: Any, where: str) -> bool:
    """Call user code; ``False`` when it raised and the handler says continue."""
    try:
        fn(*args)
        return True
    except StreamsError:
        raise
    except Exception as e:
        if spec.continue_on_error and what in ("process", "punctuator"):
            # Kafka Streams' LogAndContinueProcessingExceptionHandler logs each one
            log.warning(
                "Skipping: processor %r raised %s: %s %s "
                "(processing.exception.handler=log_and_continue)",
                spec.node_name,
                type(e).__name__,
                e,
                where,
            )
            return False
        raise StreamsError(
            f"Processor {spec.node_name!r} raised {type(e).__name__}: {e} {where}. The "
            "processing exception handler is log-and-fail (processing.exception.handler); "
            "fix the processor, or set it to log_and_continue to skip such records."
        ) from e
