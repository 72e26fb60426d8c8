"""Record-for-record parity of the TopologyTestDriver with Kafka Streams' own TopologyTestDriver
on topologies of several sub-topologies.

Kafka's driver (``streamtable.reference.drive_reference``: the reference topology of
``ReferenceApp.java`` in ``org.apache.kafka.streams.TopologyTestDriver``) keeps repartition
topics in memory and processes each piped record through every sub-topology, committing (and so
flushing its record cache) after each. streamtable's driver runs each piped record as one
micro-batch of every sub-topology in order. Both see the same records in the same order, so their
output topics must hold the same records — keys, values, timestamps — in the same order.

The inputs are small and written for the case: out-of-order timestamps, tombstones, null keys
and values, unknown keys, keys moving between groups (the subtractor's old/new pair across the
repartition topic).
"""

from __future__ import annotations

import itertools

import pytest

from streamtable import Serdes
from streamtable.demo import wordcount
from streamtable.reference import twins
from streamtable.reference.kafka_streams import drive_reference

#: 2013-01-01T00:00Z (versioned stores want realistic times)
BASE_TS = 1_356_998_400_000
_B = Serdes.bytes()


def r(topic, key, value, ts):
    """One input record: text key/value (``None`` stays null), ``ts`` ms after BASE_TS."""
    enc = lambda s: None if s is None else s.encode()  # noqa: E731
    return (topic, enc(key), enc(value), BASE_TS + ts)


def join_rekey_reduce_input():
    """Clicks (count as text) joined with versioned regions, summed per region: unknown users,
    a null key and a null value (the inner join drops them), a region tombstone, a user moving
    region, clicks out of order (joined with the region as of their own timestamp).
    """
    return [
        *(r("regions", f"u0{i}", f"r{i % 3}", 10 + i) for i in range(5)),
        r("clicks", "u00", "3", 100),
        r("clicks", "u01", "2", 110),
        r("clicks", "u05", "4", 120),  # no region
        r("clicks", None, "5", 130),  # null key
        r("clicks", "u02", "1", 140),
        r("clicks", "u00", None, 150),  # null value
        r("regions", "u01", None, 200),  # tombstone
        r("clicks", "u01", "7", 210),  # no region any more
        r("clicks", "u01", "6", 190),  # out of order: the region as of 190 (r1)
        r("regions", "u02", "r1", 220),  # u02 moves from r2 to r1
        r("clicks", "u02", "2", 230),
        r("clicks", "u02", "9", 215),  # out of order: still r2 at 215
        r("clicks", "u03", "1", 240),
        r("regions", "u05", "r0", 250),
        r("clicks", "u05", "1", 260),
        r("clicks", "u04", "6", 270),
        r("clicks", "u03", "2", 280),
    ]


def table_join_regroup_input():
    """Regions joined with scores (two tables), summed per region with a subtractor: one-sided
    keys, a user moving region, a score changing, tombstones on either side, a tombstone for a
    key never seen, a negative score.
    """
    return [
        r("l", "u00", "r0", 10),
        r("l", "u01", "r1", 20),
        r("l", "u02", "r0", 30),
        r("r", "u00", "5", 40),
        r("r", "u01", "3", 50),
        r("r", "u02", "4", 60),
        r("r", "u03", "9", 70),  # no region yet
        r("l", "u03", "r1", 80),
        r("l", "u00", "r1", 90),  # moves: r0 -5, r1 +5
        r("r", "u01", "8", 100),  # changes: r1 -3 +8
        r("r", "u02", None, 110),  # right tombstone: r0 -4
        r("l", "u01", None, 120),  # left tombstone: r1 -8
        r("r", "u02", "6", 130),  # back: r0 +6
        r("r", "u00", "-2", 140),
        r("l", "u04", "r2", 150),  # no score
        r("l", "u09", None, 160),  # tombstone of a key never seen
        r("l", "u02", "r2", 170),  # moves: r0 -6, r2 +6
        r("r", "u04", "1", 180),
    ]


def events_input(topic):
    """Events of five users in event-time disorder, a null key."""
    users = ["u00", "u01", "u00", "u02", None, "u00", "u03", "u01", "u04", "u00"]
    users += ["u02", "u01", "u00", "u05", "u03", "u01", "u02", "u00"]
    return [r(topic, u, "x", (i * 37) % 11 * 100) for i, u in enumerate(users)]


def limited_input(topic):
    """Events of eight users, timestamps mostly rising, for counts held back 100 ms
    (``until_time_limit``): updates of a key replace each other while held; a key let go at 1
    (never passes), at 4 after 3 (a tombstone, also for a key none of whose counts was let go
    before), at 5 after 4, at 2 after 1; a null key.
    """
    ev = [
        ("a", 0),
        ("y", 5),  # let go at 1 with no old value: nothing
        ("b", 10),
        ("c", 20),
        ("a", 30),
        ("b", 40),
        ("b", 50),
        ("x", 100),  # lets a go: 2 (old 1)
        ("c", 105),  # lets y go
        ("b", 115),  # b is 4 (old 3) when let go: a tombstone
        ("c", 118),
        ("c", 125),  # c is 4 (old 3) when let go: a tombstone, though c's 1 was never written
        ("a", 130),
        ("d", 135),
        ("a", 140),
        (None, 150),
        ("a", 160),
        ("x", 210),  # lets x go: 2 (old 1)
        ("d", 232),  # lets a go: 5 (old 4)
        ("e", 236),  # lets d go: 2 (old 1)
        ("b", 300),
        ("e", 310),
        ("f", 500),  # lets e and b go: 2 (old 1), 5 (old 4)
    ]
    return [r(topic, user, "x", ts) for user, ts in ev]


def closing_sessions_input(topic):
    """Events of seven users for sessions of gap 100 ms and sliding windows of 100 ms, no
    grace, closed one by one: a record inside its session (same bounds: the session's old
    value), sessions that only grow (new bounds: no old value), a lone record, and a last
    record closing every earlier window.
    """
    ev = [("A", 0), ("B", 10), ("B", 20), ("B", 15), ("C", 30), ("D", 40), ("A", 50)]
    ev += [("A", 100), ("A", 60), ("C", 130), ("E", 200), ("E", 210), ("E", 220), ("E", 230)]
    ev += [("F", 300), ("F", 305), ("F", 302), ("F", 303), ("G", 400), ("G", 450), ("G", 420)]
    ev += [("Z", 1_000)]
    return [r(topic, user, "x", ts) for user, ts in ev]


def windowed_final_input(topic):
    """Events of four users in 500 ms windows (grace 100 ms) whose final counts are 1 (never
    passes), 2, 3, 4 (passed at 3: a tombstone) and 5; a record late within grace, one past
    it (dropped), and a last record closing every earlier window.
    """
    ev = [
        ("u00", 100),
        ("u02", 120),
        ("u02", 130),
        ("u01", 150),
        ("u00", 200),
        ("u02", 300),
        ("u00", 520),
        ("u02", 400),  # late within grace: [0, 500) closes at 600
        ("u01", 650),  # closes [0, 500): u00 2, u01 1, u02 4
        ("u01", 660),
        ("u00", 700),
        ("u01", 670),
        ("u01", 680),
        ("u00", 800),
        ("u03", 1_050),
        ("u01", 690),
        ("u03", 1_060),
        ("u02", 1_100),  # closes [500, 1000): u00 3, u01 5
        ("u02", 450),  # past grace: dropped
        ("u03", 3_000),  # closes [1000, 1500): u02 1, u03 2
    ]
    return [r(topic, user, "x", ts) for user, ts in ev]


def windowed_input():
    """Events of three users in 1 s windows (grace 500 ms), some late within grace, one past it
    (dropped), regions for two of the users, one of them changing before its window closes.
    """
    return [
        r("regions", "u00", "r0", 0),
        r("regions", "u01", "r1", 0),
        r("ev", "u00", "x", 1_100),
        r("ev", "u01", "x", 1_200),
        r("ev", "u00", "x", 1_900),
        r("ev", "u02", "x", 1_300),
        r("ev", "u02", "x", 1_400),
        r("ev", "u01", "x", 2_100),
        r("ev", "u00", "x", 1_700),  # late, within grace
        r("ev", "u01", "x", 2_600),  # closes [1000, 2000)
        r("ev", "u01", "x", 2_800),
        r("regions", "u01", "r2", 2_900),
        r("ev", "u00", "x", 3_100),
        r("ev", "u00", "x", 1_500),  # past grace: dropped
        r("ev", "u00", "x", 3_300),
        r("ev", "u02", "x", 3_900),
        r("ev", "u01", "x", 4_000),
        r("ev", "u01", "x", 4_200),
        r("ev", "u00", "x", 5_000),  # closes [3000, 4000)
        r("ev", "u00", "x", 4_500),
        r("ev", "u00", "x", 4_600),
        r("ev", "u02", "x", 6_000),  # closes [4000, 5000)
    ]


def wordcount_input():
    """Lines for Kafka's WordCountDemo: upper case, punctuation, a leading separator (a ""
    word), an empty line (the word ""), digits and underscores (word characters), an accented
    letter (a separator in Java's ``\\W``), null and non-null keys.
    """
    return [
        r("lines", None, "Hello Kafka Streams", 0),
        r("lines", "k1", "hello, hello -- WORLD!", 10),
        r("lines", None, " leading space and trailing  ", 20),
        r("lines", "k2", "", 30),
        r("lines", None, "snake_case 42 and Kafka2", 40),
        r("lines", "k1", "Héllo world", 50),
        r("lines", None, "streams streams STREAMS", 60),
    ]


CASES = {
    # case: (the reference topology's params, input, twin)
    "wordcount": (
        {"input": "lines"},
        wordcount_input,
        lambda: wordcount.build_topology("lines", "out"),
    ),
    # the same reference topology; streamtable's with column expressions (Spark SQL)
    "wordcount-columns": (
        {"input": "lines"},
        wordcount_input,
        lambda: wordcount.build_topology("lines", "out", columns=True),
    ),
    "join-rekey-reduce": (
        {"stream": "clicks", "table": "regions"},
        join_rekey_reduce_input,
        lambda: twins.join_rekey_reduce("clicks", "regions", "out"),
    ),
    "table-join-regroup": (
        {"left": "l", "right": "r"},
        table_join_regroup_input,
        lambda: twins.table_join_regroup("l", "r", "out"),
    ),
    "count-histogram": (
        {"input": "ev"},
        lambda: events_input("ev"),
        lambda: twins.count_histogram("ev", "out"),
    ),
    "count-filter": (
        {"input": "ev"},
        lambda: events_input("ev"),
        lambda: twins.count_filter("ev", "out"),
    ),
    # the counts held back 100 ms (until_time_limit) filtered as a table: an update let go
    # that fails sends a tombstone when the old value of the key's last held change passed
    "count-suppress-filter": (
        {"input": "ev", "suppress_ms": "100"},
        lambda: limited_input("ev"),
        lambda: twins.count_filter("ev", "out", suppress_ms=100),
    ),
    # counts per user in 500 ms windows (grace 1000 ms: nothing late) filtered as a table
    "windowed-count-filter": (
        {"input": "ev", "size_ms": "500", "grace_ms": "1000"},
        lambda: events_input("ev"),
        lambda: twins.windowed_count_filter("ev", "out", size_ms=500, grace_ms=1000),
    ),
    # the final results of counts per user in 500 ms windows (grace 100 ms) filtered as a
    # table: a final count that fails sends a tombstone when the count before its last
    # change passed, else nothing
    "windowed-count-suppress-filter": (
        {"input": "ev", "size_ms": "500", "grace_ms": "100", "suppress": "true"},
        lambda: windowed_final_input("ev"),
        lambda: twins.windowed_count_filter("ev", "out", size_ms=500, grace_ms=100, suppress=True),
    ),
    # the same counts held back 100 ms (until_time_limit) instead, filtered as a table
    "windowed-count-limit-filter": (
        {"input": "ev", "size_ms": "500", "grace_ms": "100", "suppress_ms": "100"},
        lambda: windowed_final_input("ev"),
        lambda: twins.windowed_count_filter(
            "ev", "out", size_ms=500, grace_ms=100, suppress_ms=100
        ),
    ),
    # counts per user and session (gap 200 ms: merges of two and three sessions, a session
    # whose record falls inside it) filtered as a table; nothing late
    "session-count-filter": (
        {"input": "ev", "gap_ms": "200", "grace_ms": "1000"},
        lambda: events_input("ev"),
        lambda: twins.session_count_filter("ev", "out", gap_ms=200, grace_ms=1000),
    ),
    # counts per user in sliding windows (300 ms) filtered as a table; nothing late
    "sliding-count-filter": (
        {"input": "ev", "difference_ms": "300", "grace_ms": "1000"},
        lambda: events_input("ev"),
        lambda: twins.sliding_count_filter("ev", "out", difference_ms=300, grace_ms=1000),
    ),
    # the final results of sessions (gap 100 ms, no grace) filtered as a table: a final
    # count that fails sends a tombstone when the session's count before its last change
    # (with the same bounds) passed
    "session-count-suppress-filter": (
        {"input": "ev", "gap_ms": "100", "grace_ms": "0", "suppress": "true"},
        lambda: closing_sessions_input("ev"),
        lambda: twins.session_count_filter("ev", "out", gap_ms=100, grace_ms=0, suppress=True),
    ),
    # the final results of sliding windows (100 ms, no grace) filtered as a table
    "sliding-count-suppress-filter": (
        {"input": "ev", "difference_ms": "100", "grace_ms": "0", "suppress": "true"},
        lambda: closing_sessions_input("ev"),
        lambda: twins.sliding_count_filter(
            "ev", "out", difference_ms=100, grace_ms=0, suppress=True
        ),
    ),
    "three-level": (
        {"input": "ev"},
        lambda: events_input("ev"),
        lambda: twins.three_level("ev", "out"),
    ),
    "windowed-filter-join": (
        {"input": "ev", "table": "regions", "size_ms": "1000", "grace_ms": "500"},
        windowed_input,
        lambda: twins.windowed_filter_join("ev", "regions", "out", size_ms=1000, grace_ms=500),
    ),
}


#: Cases that run another case's reference topology (streamtable's twin differs, or the
#: reference takes other parameters).
REFERENCE = {
    "wordcount-columns": "wordcount",
    "windowed-count-suppress-filter": "windowed-count-filter",
    "count-suppress-filter": "count-filter",
    "windowed-count-limit-filter": "windowed-count-filter",
    "session-count-suppress-filter": "session-count-filter",
    "sliding-count-suppress-filter": "sliding-count-filter",
}


@pytest.mark.parametrize("case", list(CASES))
def test_driver_output_equals_kafka_streams_driver_record_for_record(
    topology_driver, tmp_path, case
):
    params, make_input, twin = CASES[case]
    records = make_input()
    want = drive_reference(REFERENCE.get(case, case), params, records, "out", work_dir=tmp_path)

    driver = topology_driver(twin())
    inputs = {}
    for topic, key, value, ts in records:
        if topic not in inputs:
            inputs[topic] = driver.create_input_topic(topic, _B, _B)
        inputs[topic].pipe_input(key, value, timestamp=ts)
    got = [
        (rec.key, rec.value, rec.timestamp)
        for rec in driver.create_output_topic("out", _B, _B).read_records_to_list()
    ]

    assert len(want) >= 5, f"Kafka Streams' driver emitted too little to compare: {want}"
    if case in COALESCED:
        want = last_per_key_and_timestamp(want)
    if case in PER_KEY_ORDER:
        want, got = by_key(want), by_key(got)
    assert got == want, "\n".join(
        f"{'  ' if a == b else '!='} Kafka Streams {a}  streamtable {b}"
        for a, b in itertools.zip_longest(want, got)
    )


#: Cases where one piped record emits results for several keys at once (two windows closing,
#: keys let go by a suppression; a line of several words): Kafka Streams emits them in window-end then key order (words: in
#: line order), streamtable in the order of its state pages (docs/testing.md: "the updates of different keys from one piped record are not
#: necessarily in processing order"). Each key's records are compared in order.
PER_KEY_ORDER = {
    "count-suppress-filter",
    "session-count-suppress-filter",
    "sliding-count-suppress-filter",
    "windowed-count-limit-filter",
    "windowed-filter-join",
    "windowed-count-suppress-filter",
    "wordcount",
    "wordcount-columns",
}


#: Cases where one piped record updates a key several times (a line repeating a word): Kafka
#: Streams' driver (no record cache) emits every update, streamtable the last one of the
#: micro-batch (the record-cache rule of DESIGN.md's semantics contract). Kafka Streams' updates
#: are reduced to the last per key and timestamp (each piped record has its own) first.
COALESCED = {"wordcount", "wordcount-columns"}


def last_per_key_and_timestamp(records):
    """``records`` without those followed later by one of the same key and timestamp."""
    last = {(rec[0], rec[2]): i for i, rec in enumerate(records)}
    return [rec for i, rec in enumerate(records) if last[(rec[0], rec[2])] == i]


def by_key(records):
    """``records`` grouped by key (each key's records in order), keys sorted."""
    groups = {}
    for rec in records:
        groups.setdefault(rec[0], []).append(rec)
    return sorted(groups.items(), key=lambda kv: (kv[0] is not None, kv[0] or b""))
