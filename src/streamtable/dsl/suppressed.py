"""``Suppressed`` and ``BufferConfig``: what ``KTable.suppress`` holds back (KIP-328).

Both kinds are driven by stream time only, never by the wall clock: without new input nothing
is emitted (Kafka Streams' behaviour; feed a later record to flush).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta

from streamtable.dsl.windows import to_millis
from streamtable.errors import TopologyError
from streamtable.topology.nodes import SuppressSpec


@dataclass(frozen=True)
class BufferConfig:
    """How much a suppression may buffer, and what happens when it is full.

    ``max_records``/``max_bytes`` bound the buffer (``None``: no bound). When a bound is
    exceeded the oldest buffered keys are emitted early (``emit_early_when_full``, what
    ``max_records``/``max_bytes`` give, as Kafka Streams' ``maxRecords``/``maxBytes`` give an
    ``EagerBufferConfig``; not allowed with ``until_window_closes``, whose results must be
    final), or the application stops with an error (``shut_down_when_full``, Kafka Streams'
    ``StrictBufferConfig``). Bytes are counted as the encoded key and value sizes.

    The bound applies to the whole operator: its state is split into pages and each page may
    hold ``ceil(bound / pages)``.

    Examples
    --------
    >>> BufferConfig.max_records(1000)
    BufferConfig(records=1000, bytes=None, emit_early=True)
    >>> BufferConfig.max_records(1000).shut_down_when_full()  # for until_window_closes
    BufferConfig(records=1000, bytes=None, emit_early=False)
    """

    records: int | None = None
    bytes: int | None = None
    emit_early: bool = False

    @classmethod
    def unbounded(cls) -> BufferConfig:
        """No bound (``BufferConfig.unbounded()``): the buffer grows with the keys."""
        return cls()

    @classmethod
    def max_records(cls, n: int) -> BufferConfig:
        """At most ``n`` buffered keys, the oldest emitted early when full
        (``BufferConfig.maxRecords``, an ``EagerBufferConfig``).

        Raises
        ------
        TopologyError
            If ``n`` is not a positive int.
        """
        return cls(records=_positive(n, "BufferConfig.max_records"), emit_early=True)

    @classmethod
    def max_bytes(cls, n: int) -> BufferConfig:
        """At most ``n`` bytes of buffered keys and values, the oldest emitted early when
        full (``BufferConfig.maxBytes``, an ``EagerBufferConfig``).

        Raises
        ------
        TopologyError
            If ``n`` is not a positive int.
        """
        return cls(bytes=_positive(n, "BufferConfig.max_bytes"), emit_early=True)

    def with_max_records(self, n: int) -> BufferConfig:
        """A copy with a record bound added (``withMaxRecords``)."""
        return replace(self, records=_positive(n, "BufferConfig.with_max_records"))

    def with_max_bytes(self, n: int) -> BufferConfig:
        """A copy with a byte bound added (``withMaxBytes``)."""
        return replace(self, bytes=_positive(n, "BufferConfig.with_max_bytes"))

    def shut_down_when_full(self) -> BufferConfig:
        """Stop the application when the buffer overflows (``shutDownWhenFull``)."""
        return replace(self, emit_early=False)

    def emit_early_when_full(self) -> BufferConfig:
        """Emit the oldest keys early when the buffer overflows (``emitEarlyWhenFull``)."""
        return replace(self, emit_early=True)


def _positive(n: int, argument: str) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
        raise TopologyError(
            f"{argument} must be a positive int; got {n!r} (Kafka Streams' BufferConfig does "
            "not check its long, but a bound below 1 overflows on the first record)."
        )
    return n


@dataclass(frozen=True)
class Suppressed:
    """What to hold back: the factory methods mirror Kafka Streams' ``Suppressed``.

    Examples
    --------
    >>> from datetime import timedelta
    >>> Suppressed.until_window_closes().spec().until_window_closes
    True
    >>> Suppressed.until_time_limit(timedelta(minutes=1)).spec().time_limit_ms
    60000
    """

    _spec: SuppressSpec

    @classmethod
    def until_window_closes(cls, buffer_config: BufferConfig | None = None) -> Suppressed:
        """Only the final result of each window, once stream time has passed its end + grace
        (``untilWindowCloses``). For tables keyed by ``Windowed`` that come straight out of a
        windowed aggregation.

        Raises
        ------
        TopologyError
            If ``buffer_config`` emits early when full (final results cannot be early), as
            ``BufferConfig.max_records(n)`` and ``max_bytes(n)`` do unless followed by
            ``shut_down_when_full()``.
        """
        cfg = buffer_config or BufferConfig.unbounded()
        if cfg.emit_early:
            raise TopologyError(
                "Suppressed.until_window_closes needs a strict buffer: use "
                "BufferConfig.unbounded() or ....shut_down_when_full(), not "
                "emit_early_when_full() (a final result cannot be emitted early; Kafka "
                "Streams' untilWindowCloses takes only a StrictBufferConfig too)."
            )
        return cls(SuppressSpec(True, 0, cfg.records, cfg.bytes, False))

    @classmethod
    def until_time_limit(
        cls, time_to_wait: timedelta | int, buffer_config: BufferConfig | None = None
    ) -> Suppressed:
        """Rate-limit updates: a key's update is held until stream time has passed its
        timestamp + ``time_to_wait``; later updates of the key replace it meanwhile
        (``untilTimeLimit``).

        Raises
        ------
        TopologyError
            If ``time_to_wait`` is negative.
        """
        ms = to_millis(time_to_wait, "Suppressed.until_time_limit time_to_wait")
        if ms < 0:
            raise TopologyError(
                f"Suppressed.until_time_limit time_to_wait must not be negative; got {ms} ms "
                "(Kafka Streams does not check it, and a negative wait acts as 0): pass 0 to "
                "emit every update at once."
            )
        cfg = buffer_config or BufferConfig.unbounded()
        return cls(SuppressSpec(False, ms, cfg.records, cfg.bytes, cfg.emit_early))

    def spec(self) -> SuppressSpec:
        """The topology-level suppression specification."""
        return self._spec
