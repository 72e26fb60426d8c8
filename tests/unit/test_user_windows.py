"""User-defined windows (a ``Windows`` subclass, Kafka Streams' custom ``Windows<TimeWindow>``):
the DSL contract, the kernel's use of ``windows_for`` (grace, lateness, emit-final, retention),
equivalence with the built-in time windows, and errors that name the subclass or operator."""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _window_runs import drive, kernel_for, records_strategy, recs, windows_of
from streamtable import Serdes, StreamsBuilder, Suppressed, TimeWindow, TimeWindows, Windows
from streamtable.errors import StreamsError, TopologyError
from streamtable.topology.nodes import CustomWindowSpec, TimeWindowSpec

pytestmark = pytest.mark.unit

HOUR = 3_600_000
DAY = 24 * HOUR


class DailyWindows(Windows):
    """Kafka's custom-window example: one-day windows starting at ``start_hour`` UTC."""

    def __init__(self, start_hour: int = 18, grace: timedelta = timedelta(hours=1)) -> None:
        self.offset = start_hour * HOUR
        self.grace = grace

    def windows_for(self, timestamp: int) -> dict[int, TimeWindow]:
        start = (timestamp - self.offset) // DAY * DAY + self.offset
        return {start: TimeWindow(start, start + DAY)}

    def size(self) -> timedelta:
        return timedelta(days=1)

    def grace_period(self) -> timedelta:
        return self.grace


@dataclass
class Hopping(Windows):
    """TimeWindows' windowsFor written as a user-defined subclass (ints are ms)."""

    size_ms: int
    advance_ms: int
    grace_ms: int

    def windows_for(self, timestamp: int) -> dict[int, TimeWindow]:
        start = max(0, timestamp - self.size_ms + self.advance_ms)
        start -= start % self.advance_ms
        found = {}
        while start <= timestamp:
            found[start] = TimeWindow(start, start + self.size_ms)
            start += self.advance_ms
        return found

    def size(self) -> int:
        return self.size_ms

    def grace_period(self) -> int:
        return self.grace_ms


@dataclass
class Boundaries(Windows):
    """Windows of unequal length between consecutive boundaries (like calendar months)."""

    cuts: tuple[int, ...]
    grace_ms: int

    def windows_for(self, timestamp: int) -> dict[int, TimeWindow]:
        i = bisect.bisect_right(self.cuts, timestamp) - 1
        return {self.cuts[i]: TimeWindow(self.cuts[i], self.cuts[i + 1])}

    def size(self) -> int:
        return max(b - a for a, b in zip(self.cuts, self.cuts[1:], strict=False))

    def grace_period(self) -> int:
        return self.grace_ms


def at(text: str) -> int:
    """Epoch ms of an ISO UTC time."""
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


# -- the DSL contract -----------------------------------------------------------------------


def test_daily_windows_start_at_18_utc():
    w = DailyWindows()
    assert w.windows_for(at("2026-11-24T17:59:59.999")) == {
        at("2026-11-23T18:00"): TimeWindow(at("2026-11-23T18:00"), at("2026-11-24T18:00"))
    }
    assert list(w.windows_for(at("2026-11-24T18:00"))) == [at("2026-11-24T18:00")]


def test_spec_carries_name_size_and_grace():
    spec = DailyWindows().spec()
    assert (spec.name, spec.size_ms, spec.grace_ms) == ("DailyWindows", DAY, HOUR)
    assert spec.bounds_for(at("2026-11-24T20:00")) == [
        (at("2026-11-24T18:00"), at("2026-11-25T18:00"))
    ]


def test_windowed_by_accepts_a_windows_subclass_with_retention_and_suppression():
    b = StreamsBuilder()
    table = (
        b.stream("trades", key_serde=Serdes.string(), value_serde=Serdes.long())
        .group_by_key()
        .windowed_by(DailyWindows())
        .count(name="daily-trades", retention=timedelta(days=3))
    )
    table.suppress(Suppressed.until_window_closes()).to_stream().to("daily-final")
    node = next(n for n in b.build()._graph.nodes if getattr(n, "store_name", "") == "daily-trades")
    assert isinstance(node.windows, CustomWindowSpec)
    assert node.retention_ms == 3 * DAY


def test_retention_shorter_than_size_plus_grace_is_refused():
    grouped = StreamsBuilder().stream("trades").group_by_key().windowed_by(DailyWindows())
    with pytest.raises(TopologyError, match="retention must be at least"):
        grouped.count(retention=timedelta(hours=2))


@pytest.mark.parametrize(
    ("size", "grace", "message"),
    [
        (0, 0, r"Bad.size\(\) must be positive; got 0 ms \(Kafka Streams accepts a zero size"),
        (-1, 0, r"Bad.size\(\) must be positive; got -1 ms.*'windowSize cannot be negative'"),
        (10, -1, r"Bad.grace_period\(\) must not be negative; got -1 ms \(Kafka Streams refuses"),
        ("1d", 0, r"Bad.size\(\) must be a datetime.timedelta \(or int ms\); got '1d'"),
    ],
)
def test_a_bad_size_or_grace_is_refused_naming_the_subclass(size, grace, message):
    @dataclass
    class Bad(Windows):
        def windows_for(self, timestamp):
            return {}

        def size(self):
            return size

        def grace_period(self):
            return grace

    with pytest.raises(TopologyError, match=message):
        StreamsBuilder().stream("t").group_by_key().windowed_by(Bad())


def test_windowed_by_names_the_accepted_kinds():
    with pytest.raises(TopologyError, match="SessionWindows or a Windows subclass; got dict"):
        StreamsBuilder().stream("t").group_by_key().windowed_by({"size": 10})


def test_an_abstract_method_left_out_cannot_be_instantiated():
    class NoGrace(Windows):
        def windows_for(self, timestamp):
            return {}

        def size(self):
            return 10

    with pytest.raises(TypeError, match="grace_period"):
        NoGrace()  # type: ignore[abstract]


def test_time_window_is_validated_like_kafkas():
    with pytest.raises(ValueError, match="must not be negative"):
        TimeWindow(-1, 5)
    with pytest.raises(ValueError, match=r"end \(3 ms\) must be after its start \(4 ms\)"):
        TimeWindow(4, 3)


def test_the_fingerprint_changes_with_the_subclass_size_or_grace():
    def fingerprint(windows: Windows) -> str:
        b = StreamsBuilder()
        b.stream("t").group_by_key().windowed_by(windows).count(name="c").to_stream().to("o")
        return b.build().fingerprint()["digest"]

    base = fingerprint(DailyWindows())
    assert fingerprint(DailyWindows()) == base
    assert fingerprint(DailyWindows(grace=timedelta(hours=2))) != base
    assert fingerprint(Hopping(DAY, DAY, HOUR)) != base  # same size and grace, other class


# -- the kernel -------------------------------------------------------------------------------


def test_daily_counts_grace_and_late_records():
    k = kernel_for(DailyWindows().spec())
    day1, day2 = at("2026-11-23T18:00"), at("2026-11-24T18:00")
    run = drive(
        k,
        recs(
            at("2026-11-24T09:00"),  # [day1, day2)
            at("2026-11-24T18:00"),  # [day2, ...): stream time now at day1's end
            at("2026-11-24T17:00"),  # day1 is within its grace (closes at 19:00)
            at("2026-11-24T19:00"),  # stream time reaches day1's end + grace
            at("2026-11-24T12:00"),  # late for day1: dropped, counted
        ),
    )
    assert run.table() == {(b"A", day1, day2): 2, (b"A", day2, day2 + DAY): 2}
    assert run.late == [(4, day1, day2)]
    # the store keeps a day for size() + grace from its start: day1 left it at 19:00
    assert windows_of(run) == {(day2, day2 + DAY): 2}


def test_daily_suppression_emits_each_day_once_when_it_closes():
    k = kernel_for(DailyWindows().spec(), emit_final=True)
    run = drive(
        k,
        recs(
            at("2026-11-24T09:00"),
            at("2026-11-24T10:00"),
            at("2026-11-24T18:30"),
            at("2026-11-24T19:00"),
        ),
        "each",
    )
    day1 = at("2026-11-23T18:00")
    assert [(w[1], v, ts) for w, v, ts in run.outputs()] == [(day1, 2, at("2026-11-24T10:00"))]
    assert [len(b) for b in run.batches] == [0, 0, 0, 1]  # at 19:00 = end + grace


def test_windows_of_unequal_length_close_at_their_own_end():
    # windows [0, 3), [3, 13), [13, 15): [0, 3) closes at 3 + grace 1 = 4 even though size() is 10
    k = kernel_for(Boundaries((0, 3, 13, 15, 100), 1).spec(), emit_final=True)
    run = drive(k, recs(1, 2, 4, 2, 12, 14, 20), "each")
    assert [(w[1], v) for w, v, _ in run.outputs()] == [(0, 2), (3, 2), (13, 1)]
    assert run.late == [(3, 0, 3)]


def test_retention_expires_windows_by_start_plus_retention():
    # Kafka Streams' window store retention: size() + grace from the window's start
    k = kernel_for(Boundaries((0, 3, 13, 50), 0).spec(), retention_ms=12)
    run = drive(k, recs(1, 12), "each")
    assert windows_of(run) == {(3, 13): 1}  # [0, 3) left the store at 0 + 12


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 8),
    st.integers(1, 8),
    st.integers(0, 6),
    records_strategy,
    st.sets(st.integers(1, 17)),
    st.booleans(),
)
def test_a_subclass_with_kafkas_windows_for_equals_time_windows(
    size, advance, grace, records, cuts, emit_final
):
    advance = min(advance, size)
    builtin = TimeWindowSpec(size, advance, grace)
    custom = Hopping(size, advance, grace).spec()
    a = drive(kernel_for(builtin, "list", emit_final=emit_final), records, cuts)
    b = drive(kernel_for(custom, "list", emit_final=emit_final), records, cuts)
    assert b.state() == a.state()
    assert b.outputs() == a.outputs()
    assert b.late == a.late


@settings(max_examples=150, deadline=None)
@given(records_strategy, st.sets(st.integers(1, 17)), st.booleans(), st.integers(0, 5))
def test_unequal_windows_give_the_same_result_for_any_micro_batch_cut(
    records, cuts, emit_final, grace
):
    spec = Boundaries((0, 1, 7, 8, 20, 33, 41, 60), grace).spec()
    runs = [
        drive(kernel_for(spec, "sum", emit_final=emit_final), records, c) for c in ("each", cuts)
    ]
    assert runs[0].state() == runs[1].state()
    assert runs[0].late == runs[1].late
    if emit_final:
        assert sorted(map(repr, runs[0].outputs())) == sorted(map(repr, runs[1].outputs()))
    else:  # updates are a changelog: one per window and batch; the table they make is equal
        assert runs[0].table() == runs[1].table()


@pytest.mark.parametrize(
    ("returned", "message"),
    [
        ([0], r"must return a dict \{start ms: TimeWindow\}; got list"),
        ({5: TimeWindow(0, 10)}, r"returned 5: TimeWindow\(start=0, end=10\)"),
        ({0: (0, 10)}, r"returned 0: \(0, 10\); each entry must be start ms -> TimeWindow"),
    ],
)
def test_a_bad_windows_for_result_stops_naming_the_operator_and_record(returned, message):
    @dataclass
    class Broken(Windows):
        def windows_for(self, timestamp):
            return returned

        def size(self):
            return 10

        def grace_period(self):
            return 0

    with pytest.raises(StreamsError, match=message) as err:
        drive(kernel_for(Broken().spec()), recs(3))
    assert "operator 'agg' (windows_for) on the record at topic 't' partition 0 offset 0" in str(
        err.value
    )


def test_time_windows_still_work_beside_the_subclass():
    # the built-in kind keeps its own spec (not a Windows subclass)
    assert isinstance(TimeWindows.of_size_with_no_grace(10).spec(), TimeWindowSpec)
