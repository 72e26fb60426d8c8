"""The Processor API without Spark: the DSL's checks, describe(), and one page's run
(:func:`run_page`) — record order, forwarding, stores, punctuation schedules and their
persistence across micro-batches, and the errors user code meets.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from streamtable import (
    Processor,
    PunctuationType,
    Record,
    Serdes,
    Stores,
    StreamsBuilder,
)
from streamtable.compiler.codecs import PickleCodec, SerdeCodec
from streamtable.compiler.paged.processor_pages import (
    ProcessorSpec,
    StoreSpec,
    needs_run,
    run_page,
)
from streamtable.compiler.paged.punctuation import schedules_for_run
from streamtable.compiler.paged.records import Rec
from streamtable.errors import StreamsError, TopologyError
from streamtable.processor.window_stores import WindowStore

pytestmark = pytest.mark.unit

S, L = Serdes.string(), Serdes.long()


def kv_store(name="counts", key=S, value=L):
    return Stores.key_value_store_builder(Stores.persistent_key_value_store(name), key, value)


class Counter(Processor):
    """Counts per key in store ``counts``; forwards the count; punctuates every 10 ms of
    stream time with each key's count and every 60 ms of wall-clock time with the total.
    """

    calls: list = []

    def init(self, context):
        self.context = context
        self.store = context.get_state_store("counts")
        context.schedule(timedelta(milliseconds=10), PunctuationType.STREAM_TIME, self.stream)
        context.schedule(timedelta(milliseconds=60), PunctuationType.WALL_CLOCK_TIME, self.wall)

    def process(self, record):
        n = (self.store.get(record.key) or 0) + 1
        self.store.put(record.key, n)
        self.context.forward(record.with_value(n))

    def stream(self, ts):
        for k, v in self.store.all():
            self.context.forward(Record(k, ("stream", v), ts))

    def wall(self, ts):
        total = sum(v for _, v in self.store.all())
        self.context.forward(Record("total", ("wall", total), ts))


def spec(supplier=Counter, *, fixed_key=False, logged=True, continue_on_error=False):
    return ProcessorSpec(
        node_name="proc",
        supplier=supplier,
        stores=(StoreSpec("counts", S, L, logged),),
        key_codec=SerdeCodec(S),
        value_codec=SerdeCodec(S),
        out_key_codec=SerdeCodec(S) if fixed_key else PickleCodec(),
        out_value_codec=PickleCodec(),
        fixed_key=fixed_key,
        application_id="app",
        continue_on_error=continue_on_error,
    )


def rec(key, ts, offset, value="x"):
    return Rec(ts, "in", 0, offset, 0, 0, S.serialize(key), S.serialize(value), None, ts)


class Page:
    """One page's persisted state across runs."""

    def __init__(self, the_spec):
        self.spec = the_spec
        self.stores: dict = {}
        self.schedules = None
        self.stream_time = None

    def run(self, records, wall_clock=None, stream_time=None):
        after = max([r.stream_time for r in records] + [self.stream_time or -1])
        if stream_time is not None:
            after = stream_time
        result = run_page(
            self.spec,
            3,
            records,
            lambda name: self.stores.setdefault(name, {}),
            self.schedules,
            self.stream_time,
            None if after < 0 else after,
            wall_clock,
        )
        self.schedules = result.schedules
        self.stream_time = None if after < 0 else after
        decode = PickleCodec().decode_many
        outs = [
            (k, v, o.ts)
            for o, k, v in zip(
                result.outputs,
                decode([o.key for o in result.outputs]),
                decode([o.value for o in result.outputs]),
                strict=True,
            )
        ]
        return outs, result


def test_records_then_stream_time_punctuation_once_per_advance_aligned_to_the_interval():
    page = Page(spec())
    outs, result = page.run([rec("a", 1, 0)], wall_clock=0)
    # the record first, then the stream-time punctuation (scheduled at 0: due on the first
    # record), as Kafka Streams punctuates after processing
    assert outs == [("a", 1, 1), ("a", ("stream", 1), 1)]
    assert result.changes == {"counts": {b"a": (L.serialize(1), 1)}}
    outs, _ = page.run([rec("a", 5, 1), rec("b", 9, 2)], wall_clock=0)
    assert outs == [("a", 2, 5), ("b", 1, 9)]  # next due at 10
    outs, _ = page.run([rec("b", 37, 3)], wall_clock=0)
    # 10, 20 and 30 passed: one call with stream time 37, next due at 40
    assert outs == [("b", 2, 37), ("a", ("stream", 2), 37), ("b", ("stream", 2), 37)]
    assert [s.next for s in page.schedules] == [40, 60]
    outs, _ = page.run([rec("a", 12, 4)], wall_clock=0)  # out of order: stream time stays 37
    assert outs == [("a", 3, 12)]


class TwoSchedules(Processor):
    """Schedules every 10 ms, then every 3 ms, of stream time; each punctuation forwards its
    name.
    """

    def init(self, context):
        self.context = context
        for name, ms in (("every-10", 10), ("every-3", 3)):
            context.schedule(
                timedelta(milliseconds=ms),
                PunctuationType.STREAM_TIME,
                lambda ts, name=name: context.forward(Record(name, name, ts)),
            )

    def process(self, record):
        pass


def test_due_punctuations_fire_earliest_due_first_not_in_schedule_order():
    # Kafka Streams' PunctuationQueue is a priority queue by due time: at stream time 25 the
    # 3 ms schedule (due at 3) fires before the 10 ms one (due at 10), although scheduled last
    page = Page(spec(TwoSchedules))
    outs, _ = page.run([rec("a", 0, 0)])
    assert outs == [("every-10", "every-10", 0), ("every-3", "every-3", 0)]  # both due at 0
    outs, _ = page.run([rec("a", 25, 1)])
    assert outs == [("every-3", "every-3", 25), ("every-10", "every-10", 25)]
    assert [s.next for s in page.schedules] == [30, 27]


def test_wall_clock_punctuation_one_interval_after_init_then_aligned():
    page = Page(spec())
    page.run([], wall_clock=1_000)  # first run: init schedules wall clock at 1_060
    assert [(s.kind, s.next) for s in page.schedules] == [
        ("stream_time", 0),
        ("wall_clock_time", 1_060),
    ]
    assert not needs_run([], page.schedules, None, 1_059)
    assert needs_run([], page.schedules, None, 1_060)
    outs, _ = page.run([], wall_clock=1_200)  # 1_060 and 1_120 and 1_180 collapse
    assert outs == [("total", ("wall", 0), 1_200)]
    assert page.schedules[1].next == 1_240


def test_a_restarted_application_schedules_afresh_as_kafka_streams_init_does():
    # StreamTask.schedule at each start: wall clock one interval after the restart (the
    # intervals missed while down are not made up at once), stream time due at once
    page = Page(spec())
    page.run([rec("a", 1, 0)], wall_clock=1_000)  # wall clock due at 1_060
    meta = {"schedules": [s.to_tuple() for s in page.schedules], "run": "first"}
    assert schedules_for_run(meta, "first") == page.schedules  # the same run: kept
    page.schedules = schedules_for_run(meta, "second")  # the application restarted
    assert page.schedules is None
    outs, _ = page.run([], wall_clock=90_000, stream_time=1)
    assert outs == [("a", ("stream", 1), 1)]  # no wall-clock call for the downtime
    assert [(s.kind, s.next) for s in page.schedules] == [
        ("stream_time", 10),
        ("wall_clock_time", 90_060),
    ]


def test_stores_keep_bytes_per_page_and_log_only_when_logging_is_enabled():
    page = Page(spec(logged=False))
    _, result = page.run([rec("a", 1, 0), rec("a", 2, 1)])
    assert page.stores == {"counts": {b"a": L.serialize(2)}}
    assert result.changes == {}


def test_stores_answer_persistent_as_their_supplier_says():
    """``InMemoryKeyValueStore.persistent()`` is false in Kafka Streams; it was always true."""

    class Ask(Processor):
        def init(self, context):
            self.context = context

        def process(self, record):
            store = self.context.get_state_store("counts")
            self.context.forward(record.with_value(store.persistent()))

    def answer(persistent):
        the_spec = spec(Ask)
        stores = (StoreSpec("counts", S, L, True, persistent=persistent),)
        outs, _ = Page(dataclasses.replace(the_spec, stores=stores)).run([rec("a", 1, 0)])
        return outs[0][1]

    assert (answer(True), answer(False)) == (True, False)
    w = Stores.in_memory_window_store("w", 10, 10)
    assert not WindowStore(w, {}, S, L).persistent()
    assert WindowStore(dataclasses.replace(w, persistent=True), {}, S, L).persistent()


def test_cancelled_schedules_stay_cancelled_in_later_instances():
    class Once(Processor):
        def init(self, context):
            self.context = context
            self.handle = context.schedule(
                timedelta(milliseconds=5), PunctuationType.STREAM_TIME, self.tick
            )

        def process(self, record):
            pass

        def tick(self, ts):
            self.context.forward(Record("tick", ts, ts))
            self.handle.cancel()

    page = Page(spec(Once))
    assert page.run([rec("a", 1, 0)])[0] == [("tick", 1, 1)]
    assert page.run([rec("a", 50, 1)])[0] == []
    assert page.schedules[0].cancelled


def test_process_values_cannot_change_the_key():
    class Rekey(Processor):
        def process(self, record):
            self.context.forward(record.with_key("other"))

    with pytest.raises(StreamsError, match=r"\(process_values\) forwarded key 'other'.*'a'"):
        Page(spec(Rekey, fixed_key=True)).run([rec("a", 1, 0)])


def test_schedule_outside_init_and_tiny_intervals_are_refused():
    class Late(Processor):
        def process(self, record):
            self.context.schedule(timedelta(seconds=1), PunctuationType.STREAM_TIME, print)

    with pytest.raises(StreamsError, match=r"schedule\(\) outside init\(\)"):
        Page(spec(Late)).run([rec("a", 1, 0)])

    class Tiny(Processor):
        def init(self, context):
            context.schedule(timedelta(microseconds=10), PunctuationType.STREAM_TIME, print)

        def process(self, record):
            pass

    with pytest.raises(StreamsError, match="minimum supported scheduling interval is 1 milli"):
        Page(spec(Tiny)).run([rec("a", 1, 0)])


def test_durations_are_whole_milliseconds_exactly_as_duration_to_millis():
    """``int(td.total_seconds() * 1000)`` made 1001 ms into 1000 (a float's rounding): a
    punctuation every 1001 ms fired at 1000, and a 2002 ms window store held 2001 ms.
    """

    class Every1001(Processor):
        def init(self, context):
            context.schedule(
                timedelta(milliseconds=1001),
                PunctuationType.STREAM_TIME,
                lambda ts: context.forward(Record("p", "punctuated", ts)),
            )

        def process(self, record):
            pass

    page = Page(spec(Every1001))
    outs, _ = page.run([rec("a", 0, 0)], wall_clock=0)
    assert outs == [("p", "punctuated", 0)]
    outs, _ = page.run([rec("a", 1000, 1)], wall_clock=0)
    assert outs == []  # the next is due at 1001, not 1000
    assert [s.next for s in page.schedules] == [1001]
    w = timedelta(milliseconds=2002)
    supplier = Stores.persistent_window_store("w", w, w)
    assert (supplier.retention_ms, supplier.window_size_ms) == (2002, 2002)


def test_unconnected_store_names_the_connected_ones():
    class Wrong(Processor):
        def init(self, context):
            context.get_state_store("other")

        def process(self, record):
            pass

    with pytest.raises(StreamsError, match=r"no access to StateStore 'other'.*\['counts'\]"):
        Page(spec(Wrong)).run([rec("a", 1, 0)])


def test_processing_errors_fail_with_the_record_or_are_skipped_and_counted(caplog):
    class Picky(Processor):
        def process(self, record):
            if record.key == "bad":
                raise ValueError("no bad keys")
            self.context.forward(record)

    with pytest.raises(
        StreamsError, match=r"'proc' raised ValueError: no bad keys on the record of in-0@1"
    ):
        Page(spec(Picky)).run([rec("a", 1, 0), rec("bad", 2, 1)])
    outs, result = Page(spec(Picky, continue_on_error=True)).run(
        [rec("a", 1, 0), rec("bad", 2, 1), rec("c", 3, 2)]
    )
    assert [k for k, _, _ in outs] == ["a", "c"] and result.skipped == 1
    # logged as Kafka Streams' LogAndContinueProcessingExceptionHandler does
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        "Skipping: processor 'proc' raised ValueError: no bad keys on the record of in-0@1 "
        "(key 'bad') (processing.exception.handler=log_and_continue)"
    ]


def test_record_metadata_in_process_and_none_in_punctuators():
    seen = []

    class Meta(Processor):
        def init(self, context):
            self.context = context
            context.schedule(timedelta(milliseconds=1), PunctuationType.STREAM_TIME, self.tick)

        def process(self, record):
            seen.append(self.context.record_metadata())

        def tick(self, ts):
            seen.append((self.context.record_metadata(), self.context.current_stream_time_ms()))

    Page(spec(Meta)).run([rec("a", 7, 42)])
    assert [(m.topic, m.partition, m.offset) for m in seen[:1]] == [("in", 0, 42)]
    assert seen[1] == (None, 7)


# -- the DSL -------------------------------------------------------------------------------


def test_process_with_a_store_describes_as_kafka_streams_does():
    b = StreamsBuilder()
    b.add_state_store(kv_store())
    b.stream("in", key_serde=S, value_serde=S).process(Counter, "counts").to("out")
    text = str(b.build().describe())
    assert "Processor: KSTREAM-PROCESSOR-0000000001 (stores: [counts])" in text
    assert b.build is not None


def test_process_refuses_unknown_or_shared_stores_and_bad_suppliers():
    b = StreamsBuilder()
    s = b.stream("in")
    with pytest.raises(TopologyError, match=r"StateStore 'counts' is not added yet.*\[\]"):
        s.process(Counter, "counts")
    b.add_state_store(kv_store())
    s.process(Counter, "counts")
    with pytest.raises(TopologyError, match="already connected to processor 'KSTREAM-PROCESSOR"):
        s.process_values(Counter, "counts")
    one = Counter()
    with pytest.raises(TopologyError, match="returned the same object twice"):
        s.process(lambda: one)
    with pytest.raises(TopologyError, match="returned int, which has no process"):
        s.process(lambda: 3)
    with pytest.raises(TopologyError, match="is already added"):
        b.add_state_store(kv_store())
    with pytest.raises(TopologyError, match="expects a store builder"):
        b.add_state_store("counts")


def test_process_output_is_repartitioned_before_grouping_but_process_values_is_not():
    b = StreamsBuilder()
    s = b.stream("in", key_serde=S, value_serde=S)
    s.process(Counter).group_by_key(key_serde=S, value_serde=L).count().to_stream().to("a")
    s.process_values(Counter).group_by_key().count().to_stream().to("b")
    text = str(b.build().describe())
    assert text.count("-repartition") == 2  # sink and source of one repartition topic


def test_a_window_store_retaining_duplicates_keeps_them_across_micro_batches():
    # each micro-batch opens the page's store anew over the same bytes; the duplicates'
    # sequence number lives with them (Kafka Streams' seqnum lives as long as the store), so a
    # later batch's duplicate does not overwrite an earlier one
    from streamtable.processor.window_stores import WindowBytesStoreSupplier, WindowStore

    supplier = WindowBytesStoreSupplier.of("joins", 100, 10, True, True)
    data: dict = {}
    WindowStore(supplier, data, S, L).put("a", 1, 0)
    second = WindowStore(supplier, data, S, L)
    second.put("a", 2, 0)
    second.put("a", 3, 0)
    assert WindowStore(supplier, data, S, L).fetch("a", 0, 0) == [(0, 1), (0, 2), (0, 3)]
