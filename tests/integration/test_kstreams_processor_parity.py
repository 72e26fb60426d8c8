"""Record-for-record parity of a Processor API topology with Kafka Streams' own TopologyTestDriver.

The reference topology ``processor-punctuation`` (``ReferenceApp.CountingProcessor``) counts
per key in a store, forwards each count, and punctuates on stream time (every key's count)
and on wall-clock time (the sum); its twin is ``twins.processor_punctuation``. Both drivers get the
same records and wall-clock advances; their output topics must hold the same records — keys,
values, timestamps — in the same order: this checks where punctuation fires (after the
record, first on the first record, once per advance however many intervals were missed,
aligned), which time it gets, and the store's iteration order.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from streamtable import Serdes
from streamtable.reference import twins
from streamtable.reference.kafka_streams import ADVANCE_WALL_CLOCK, drive_reference
from streamtable.testing import TopologyTestDriver

S, L = Serdes.string(), Serdes.long()
STREAM_MS, WALL_MS = 10_000, 60_000
#: 2013-01-01T00:00Z
BASE = 1_356_998_400_000


def scenario():
    """Records (``"in"``, key, value, ts) and wall-clock advances, in driver order."""

    def r(key, ts):
        return ("in", key.encode(), b"x", BASE + ts)

    def wall(ms):
        return (ADVANCE_WALL_CLOCK, None, None, ms)

    return [
        r("b", 1_000),  # first record: the stream-time punctuation scheduled at 0 fires
        r("a", 4_000),
        wall(30_000),  # nothing due (wall clock scheduled at start + 60 s)
        r("a", 9_999),
        r("c", 10_000),  # 10 s is due: fires with stream time BASE + 10 s
        r("a", 3_000),  # out of order: stream time does not move
        wall(30_000),  # start + 60 s: the first wall-clock punctuation
        r("b", 47_000),  # 20, 30, 40 s missed: one punctuation at 47 s, next at 50 s
        r("b", 49_999),
        wall(150_000),  # 120, 180 s missed: one at start + 210 s, next at 240 s
        r("c", 50_000),
        r("d", 50_001),
        wall(29_999),
        wall(1),  # exactly start + 240 s
        r("a", 120_000),
    ]


def streamtable_output(records, start_ms):
    topology = twins.processor_punctuation("in", "out", stream_ms=STREAM_MS, wall_ms=WALL_MS)
    out = []
    with TopologyTestDriver(topology, initial_wall_clock_time=start_ms) as driver:
        inp = driver.create_input_topic("in", Serdes.bytes(), Serdes.bytes())
        output = driver.create_output_topic("out", Serdes.bytes(), Serdes.bytes())
        for topic, key, value, ts in records:
            if topic == ADVANCE_WALL_CLOCK:
                driver.advance_wall_clock_time(timedelta(milliseconds=ts))
            else:
                inp.pipe_input(key, value, ts)
            out.extend((r.key, r.value, r.timestamp) for r in output.read_records_to_list())
    return out


@pytest.mark.timeout(900)
def test_processor_punctuation_matches_kafka_streams_driver(spark, tmp_path):
    records = scenario()
    start = BASE
    expected = drive_reference(
        "processor-punctuation",
        {"input": "in", "stream_ms": str(STREAM_MS), "wall_ms": str(WALL_MS)},
        records,
        "out",
        work_dir=tmp_path,
        initial_wall_clock_ms=start,
    )
    got = streamtable_output(records, start)
    decoded = [(k.decode(), v.decode(), ts - BASE) for k, v, ts in expected]
    # the scenario's comments hold: the reference fired both kinds, with collapsed intervals
    assert ("b", "st:1", 1_000) == decoded[1]
    assert ("total", "wall:5", 60_000) in decoded
    assert ("total", "wall:7", 210_000) in decoded
    assert ("total", "wall:9", 240_000) in decoded
    assert got == expected
