"""Column expressions (streamtable.functions) in stateless operations: Spark SQL with the
same results as the Python callables they replace, and clear errors where they cannot run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from streamtable import Serdes, StreamsBuilder
from streamtable import functions as F
from streamtable.demo.text import java_split_words
from streamtable.errors import TopologyError
from streamtable.testing import TopologyTestDriver

S, L, INT = Serdes.string(), Serdes.long(), Serdes.integer()


def _outputs(
    build: Callable[[StreamsBuilder], None],
    in_serdes: tuple[Any, Any],
    out_serdes: tuple[Any, Any],
    records: list[tuple[Any, Any, int]],
) -> list[tuple[Any, Any, int]]:
    b = StreamsBuilder()
    build(b)
    with TopologyTestDriver(b.build()) as driver:
        inp = driver.create_input_topic("in", *in_serdes)
        out = driver.create_output_topic("out", *out_serdes)
        for k, v, ts in records:
            inp.pipe_input(k, v, timestamp=ts)
        return [(r.key, r.value, r.timestamp) for r in out.read_records_to_list()]


def _uses_python(build: Callable[[StreamsBuilder], None]) -> bool:
    """Whether the compiled queries run a Python stage (``mapInArrow``)."""
    b = StreamsBuilder()
    build(b)
    with TopologyTestDriver(b.build()) as driver:
        plans = [p.df._jdf.queryExecution().analyzed().toString() for p in driver._plans]
    return any("MapInArrow" in p for p in plans)


def test_string_chain_gives_the_callables_output_without_python(spark):
    def columns(b):
        (
            b.stream("in", key_serde=S, value_serde=S)
            .filter(F.length("value") > 1)
            .map_values(F.upper("value"))
            .flat_map_values(F.split("value", " "))
            .filter_not(F.col("value") == "SKIP")
            .select_key(F.concat("key", F.lit("-"), "value"))
            .to("out", key_serde=S, value_serde=S)
        )

    def callables(b):
        (
            b.stream("in", key_serde=S, value_serde=S)
            .filter(lambda k, v: v is not None and len(v) > 1)
            .map_values(lambda v: v.upper())
            .flat_map_values(lambda v: v.split(" "))
            .filter_not(lambda k, v: v == "SKIP")
            .select_key(lambda k, v: f"{k}-{v}")
            .to("out", key_serde=S, value_serde=S)
        )

    records = [("a", "x y", 10), ("b", "z", 11), ("c", None, 12), ("d", "q skip r", 13)]
    expected = _outputs(callables, (S, S), (S, S), records)
    assert expected == [
        ("a-X", "X", 10),
        ("a-Y", "Y", 10),
        ("d-Q", "Q", 13),
        ("d-R", "R", 13),
    ]
    assert _outputs(columns, (S, S), (S, S), records) == expected
    assert not _uses_python(columns)
    assert _uses_python(callables)


def test_long_and_integer_values_round_trip_with_negative_numbers_and_nulls(spark):
    def columns(b):
        (
            b.stream("in", key_serde=INT, value_serde=L)
            .map_values(F.col("value") * 2 - 1)
            .filter(F.col("value").isNull() | (F.col("value") < 0) | (F.col("value") > 10))
            .select_key(-F.col("key"))
            .to("out", key_serde=INT, value_serde=L)
        )

    def callables(b):
        (
            b.stream("in", key_serde=INT, value_serde=L)
            .map_values(lambda v: None if v is None else v * 2 - 1)
            .filter(lambda k, v: v is None or v < 0 or v > 10)
            .select_key(lambda k, v: -k)
            .to("out", key_serde=INT, value_serde=L)
        )

    records = [
        (1, 3, 1),
        (2, 100, 2),
        (-7, -(2**40), 3),
        (2**31 - 1, None, 4),
        (5, 2**61, 5),
    ]
    expected = _outputs(callables, (INT, L), (INT, L), records)
    assert expected == [
        (-2, 199, 2),
        (7, -(2**41) - 1, 3),
        (-(2**31) + 1, None, 4),
        (-5, 2**62 - 1, 5),
    ]
    assert _outputs(columns, (INT, L), (INT, L), records) == expected


@pytest.mark.parametrize(
    "line",
    ["all streams lead to kafka", " leading", "trailing!! ", "", "!!!", "Héllo, wörld_9"],
)
def test_wordcount_words_column_splits_as_java(spark, line):
    from streamtable.demo.wordcount import words_column

    def columns(b):
        b.stream("in", key_serde=S, value_serde=S).flat_map_values(words_column()).to(
            "out", key_serde=S, value_serde=S
        )

    got = [v for _k, v, _ts in _outputs(columns, (S, S), (S, S), [(None, line, 1)])]
    assert got == java_split_words(line)


def test_group_by_column_and_count_equal_the_callable_topology(spark):
    from streamtable.demo.wordcount import build_topology

    lines = ["Hello Kafka Streams", "hello kafka", " all streams lead to kafka!", "", "!!"]

    def counts(topology):
        with TopologyTestDriver(topology) as driver:
            inp = driver.create_input_topic("streams-plaintext-input", S, S)
            out = driver.create_output_topic("streams-wordcount-output", S, L)
            for i, line in enumerate(lines):
                inp.pipe_input(None, line, timestamp=100 + i)
            records = [(r.key, r.value, r.timestamp) for r in out.read_records_to_list()]
            return records, sorted(driver.get_key_value_store("counts-store").all())

    expected = counts(build_topology())
    assert expected[1] == sorted({"hello": 2, "kafka": 3, "streams": 2, "all": 1, "lead": 1,
                                  "to": 1, "": 2}.items())  # fmt: skip
    assert counts(build_topology(columns=True)) == expected


def test_a_python_filter_between_column_steps_keeps_both_paths(spark):
    def mixed(b):
        (
            b.stream("in", key_serde=S, value_serde=S)
            .map_values(F.lower("value"))
            .filter(lambda k, v: v.startswith("a"))
            .map_values(F.concat("value", F.lit("!")))
            .to("out", key_serde=S, value_serde=S)
        )

    records = [("k", "Abc", 1), ("k", "bcd", 2), ("j", "AX", 3)]
    assert _outputs(mixed, (S, S), (S, S), records) == [("k", "abc!", 1), ("j", "ax!", 3)]


def _compile_error(build: Callable[[StreamsBuilder], None]) -> str:
    b = StreamsBuilder()
    build(b)
    with pytest.raises(TopologyError) as e, TopologyTestDriver(b.build()):
        pass
    return str(e.value)


def test_a_json_value_is_not_a_column_and_the_error_says_so(spark, capfd):
    msg = _compile_error(
        lambda b: (
            b.stream("in", key_serde=S, value_serde=Serdes.json())
            .filter(F.col("value") > 1, name="big")
            .to("out", key_serde=S, value_serde=Serdes.json())
        )
    )
    assert (
        "KStream.filter/filter_not of node 'big' is the column expression (col('value') > 1)" in msg
    )
    assert "The value is not a column here: its serde is Json" in msg
    assert "use a Python callable" in msg
    assert "DataFrameQueryContextLogger" not in capfd.readouterr().err  # no Spark log line


def test_a_value_made_by_a_python_callable_is_not_a_column(spark):
    msg = _compile_error(
        lambda b: (
            b.stream("in", key_serde=S, value_serde=S)
            .map_values(lambda v: v.split(), name="py")
            .map_values(F.size("value"), name="size")
            .to("out", key_serde=S, value_serde=INT)
        )
    )
    assert "KStream.map_values of node 'size'" in msg
    assert "it holds Python objects" in msg


def test_non_boolean_filter_non_array_flat_map_and_unencodable_results_are_refused(spark):
    def topology(op):
        def build(b):
            op(b.stream("in", key_serde=S, value_serde=S)).to("out", key_serde=S, value_serde=S)

        return build

    msg = _compile_error(topology(lambda s: s.filter(F.length("value"), name="f")))
    assert "node 'f'" in msg and "a predicate must be boolean, this one is int" in msg
    msg = _compile_error(topology(lambda s: s.flat_map_values(F.upper("value"), name="fm")))
    assert "node 'fm'" in msg and "it must give an array, this one is string" in msg
    msg = _compile_error(topology(lambda s: s.map_values(F.length("value") / 2, name="half")))
    assert "node 'half'" in msg and "it gives a double value" in msg
    assert "must be string, binary, bigint or int (cast it" in msg
    msg = _compile_error(topology(lambda s: s.map_values(F.col("nope"), name="n")))
    assert "node 'n'" in msg and "Spark cannot evaluate it" in msg and "nope" in msg


def test_generators_and_aggregates_are_refused_as_they_would_change_the_record_count(spark):
    def topology(op):
        def build(b):
            op(b.stream("in", key_serde=S, value_serde=S)).to("out", key_serde=S, value_serde=S)

        return build

    msg = _compile_error(
        topology(lambda s: s.map_values(F.explode(F.split("value", " ")), name="gen"))
    )
    assert "KStream.map_values of node 'gen'" in msg
    assert "Spark cannot evaluate it per record" in msg
    msg = _compile_error(topology(lambda s: s.filter(F.count("value") > 1, name="agg")))
    assert "KStream.filter/filter_not of node 'agg'" in msg
    assert "Spark cannot evaluate it per record" in msg


def test_on_a_broker_a_bad_record_before_a_column_step_is_skipped_and_counted(
    kafka_broker, spark, topic_name, app_config
):
    """A long value is validated by the source's Python stage first (a column step cannot tell
    a malformed record), then doubled in Spark SQL, written under exactly-once."""
    import struct
    from datetime import timedelta

    from _support import ensure_topics, produce_values, read_topic
    from streamtable import KafkaStreams

    bs = kafka_broker.bootstrap_servers
    src, out = topic_name("in"), topic_name("out")
    ensure_topics(bs, {src: 1, out: 1})
    good = [struct.pack(">q", n) for n in (1, -3)]
    produce_values(bs, src, [("a", good[0]), ("b", b"bad"), ("c", good[1])])
    b = StreamsBuilder()
    b.stream(src, key_serde=S, value_serde=L).map_values(F.col("value") * 2).to(
        out, key_serde=S, value_serde=L
    )
    app = KafkaStreams(
        b.build(),
        app_config(
            **{
                "default.deserialization.exception.handler": "log_and_continue",
                "processing.guarantee": "exactly_once_v2",
            }
        ),
    )
    app.start()
    try:
        app.await_caught_up(timeout=timedelta(minutes=2))
        assert app.metrics()["dropped-records"] == {"deserialization": 1}
    finally:
        app.close()
    got = {k.decode(): struct.unpack(">q", v)[0] for k, v, _ in read_topic(bs, out)}
    assert got == {"a": 2, "c": -6}


def test_real_time_mode_needs_spark_s_kafka_sink(spark):
    from streamtable import KafkaStreams
    from streamtable.errors import ConfigError

    b = StreamsBuilder()
    b.stream("in", key_serde=S, value_serde=S).map_values(F.upper("value")).to("out")
    config = {
        "application.id": "rtm",
        "bootstrap.servers": "localhost:9",
        "streamtable.trigger": "real_time",
        "processing.guarantee": "exactly_once_v2",
    }
    with pytest.raises(ConfigError, match="set processing.guarantee='at_least_once'"):
        KafkaStreams(b.build(), config)
    config = {**config, "processing.guarantee": "at_least_once"}
    config["streamtable.max.offsets.per.trigger"] = 100
    with pytest.raises(ConfigError, match="unset streamtable.max.offsets.per.trigger"):
        KafkaStreams(b.build(), config)


def test_a_topology_refused_at_first_start_leaves_no_fingerprint_behind(
    kafka_broker, spark, topic_name, app_config
):
    """After a refused first start, the corrected topology of another shape starts under the
    same application.id (nothing ran, so nothing is incompatible)."""
    from _support import ensure_topics
    from streamtable import KafkaStreams

    bs = kafka_broker.bootstrap_servers
    src, out = topic_name("in"), topic_name("out")
    ensure_topics(bs, {src: 1, out: 1})
    config = app_config(**{"streamtable.trigger": "real_time"})
    b = StreamsBuilder()
    b.stream(src, key_serde=S, value_serde=S).map_values(str.upper).to(
        out, key_serde=S, value_serde=S
    )
    assert "runs Python" in _start_error(b.build(), config)
    b = StreamsBuilder()
    b.stream(src, key_serde=S, value_serde=S).group_by(F.col("value"), key_serde=S).count(
        name="c"
    ).to_stream().to(out, key_serde=S, value_serde=L)
    app = KafkaStreams(b.build(), {**config, "streamtable.trigger": "processing_time"})
    app.start()
    app.close()


def _start_error(topology: Any, config: dict) -> str:
    from streamtable import KafkaStreams

    app = KafkaStreams(topology, config)
    with pytest.raises(TopologyError) as e:
        app.start()
    app.close()
    return str(e.value)


def test_real_time_mode_refuses_python_steps_and_state_naming_them(
    kafka_broker, spark, topic_name, app_config
):
    from _support import ensure_topics

    bs = kafka_broker.bootstrap_servers
    src, out = topic_name("in"), topic_name("out")
    ensure_topics(bs, {src: 1, out: 1})

    def config():  # a new application each time (its own checkpoint)
        return app_config(**{"streamtable.trigger": "real_time"})

    b = StreamsBuilder()
    s = b.stream(src, key_serde=S, value_serde=S)
    s = s.filter(F.col("value") != "").map_values(lambda v: v.upper(), name="shout")
    s.to(out, key_serde=S, value_serde=S)
    msg = _start_error(b.build(), config())
    assert "streamtable.trigger='real_time'" in msg
    assert "runs Python for shout (a Python map_values function)" in msg
    assert "Write those steps as column expressions" in msg

    b = StreamsBuilder()
    b.stream(src, key_serde=S, value_serde=L).filter(F.col("value") > 0).to(
        out, key_serde=S, value_serde=L
    )
    msg = _start_error(b.build(), config())
    assert "(its records are checked in Python)" in msg

    b = StreamsBuilder()
    b.stream(src, key_serde=S, value_serde=S).group_by(F.col("value"), key_serde=S).count(
        name="c"
    ).to_stream().to(out, key_serde=S, value_serde=L)
    msg = _start_error(b.build(), config())
    assert "has a stateful operator" in msg

    wide = topic_name("wide")
    ensure_topics(bs, {wide: 3})
    b = StreamsBuilder()
    b.stream(wide, key_serde=S, value_serde=S).map_values(F.upper("value")).to(
        out, key_serde=S, value_serde=S
    )
    msg = _start_error(b.build(), config())
    assert "read 3 Kafka partitions in all" in msg and "Spark has 2 cores" in msg


def test_real_time_mode_processes_records_while_its_batch_is_still_running(
    kafka_broker, spark, topic_name, app_config
):
    """Spark's real-time mode: output appears long before the first batch (here 10 minutes,
    the commit interval) ends, i.e. records are processed as they arrive."""
    from _support import ensure_topics, produce_values, read_topic, wait_until
    from streamtable import KafkaStreams

    bs = kafka_broker.bootstrap_servers
    src, out = topic_name("in"), topic_name("out")
    ensure_topics(bs, {src: 2, out: 2})
    b = StreamsBuilder()
    (
        b.stream(src, key_serde=S, value_serde=S)
        .filter_not(F.col("value") == "skip")
        .flat_map_values(F.split("value", " "))
        .map_values(F.upper("value"))
        .to(out, key_serde=S, value_serde=S)
    )
    app = KafkaStreams(
        b.build(),
        app_config(**{"streamtable.trigger": "real_time", "commit.interval.ms": 600_000}),
    )
    app.start()
    try:
        produce_values(bs, src, [("a", "x y"), ("b", "skip"), ("c", "z")])
        wait_until(lambda: len(read_topic(bs, out)) >= 3, 120, "the 3 records in real time")
        got = sorted((k.decode(), v.decode()) for k, v, _ in read_topic(bs, out))
        assert got == [("a", "X"), ("a", "Y"), ("c", "Z")]
        (query,) = app.queries
        assert query.isActive
        assert not [p for p in query.recentProgress if p.numInputRows]  # batch 0 still runs
    finally:
        app.close()
