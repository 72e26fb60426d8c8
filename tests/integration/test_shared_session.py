"""An application runs in the user's Spark session (a notebook's, a test's): what it sets for its
own queries does not change the session for the user's queries."""

from __future__ import annotations

import operator

from streamtable import KafkaStreams, Serdes, StreamsBuilder

ENCODING = "spark.sql.streaming.stateStore.encodingFormat"


def test_an_application_leaves_the_session_settings_as_it_found_them(
    kafka_broker, spark, topic_name, app_config
):
    from _support import ensure_topics, wait_until

    bs = kafka_broker.bootstrap_servers
    src, out = topic_name("in"), topic_name("out")
    ensure_topics(bs, {src: 1, out: 1})
    builder = StreamsBuilder()
    (
        builder.stream(src, key_serde=Serdes.string(), value_serde=Serdes.long())
        .group_by_key()
        .reduce(operator.add)  # transformWithState: its query's state is encoded as avro
        .to_stream()
        .to(out, value_serde=Serdes.long())
    )
    before = spark.conf.get(ENCODING, None)
    with KafkaStreams(builder.build(), app_config()) as app:
        app.start()
        assert spark.conf.get(ENCODING, None) == before
        # the user's own streaming aggregation in the same session: Spark refuses avro state
        # for it, so it runs only if the application's choice stayed with its queries
        query = (
            spark.readStream.format("rate")
            .option("rowsPerSecond", 5)
            .load()
            .groupBy("value")
            .count()
            .writeStream.format("noop")
            .outputMode("update")
            .start()
        )
        try:
            wait_until(
                lambda: query.lastProgress is not None or not query.isActive,
                60,
                "a first micro-batch of the user's aggregation",
            )
            assert query.exception() is None
            assert query.isActive
        finally:
            query.stop()
