"""The HTTP query service of a running application (``application.server``): real broker, real
Spark. Reads wait for the store's position through ``min_position`` (never a fixed sleep).
"""

from __future__ import annotations

import collections
import socket
import struct

import httpx
import pytest

from _support import ensure_topics, produce_records
from streamtable import KafkaStreams, Serdes, StreamsBuilder

S, L = Serdes.string(), Serdes.long()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_running_application_answers_queries_over_http(
    kafka_broker, spark, topic_name, app_config
):
    bs = kafka_broker.bootstrap_servers
    src, out = topic_name("clicks"), topic_name("out")
    ensure_topics(bs, {src: 2, out: 1})
    users = [f"u{i % 5}" for i in range(40)]
    produce_records(
        bs, src, [(u.encode(), struct.pack(">q", 1), 1_000 + i) for i, u in enumerate(users)]
    )
    want = collections.Counter(users)

    b = StreamsBuilder()
    b.stream(src, key_serde=S, value_serde=L).group_by_key().count(
        name="click-counts"
    ).to_stream().to(out, key_serde=S, value_serde=L)
    address = f"127.0.0.1:{free_port()}"
    app = KafkaStreams(b.build(), app_config(**{"application.server": address}))
    app.start()
    try:
        with httpx.Client(base_url=f"http://{address}", timeout=200) as http:
            # every record produced: the last offsets of both partitions (40 records in all)
            ends = [o - 1 for o in _end_offsets(bs, src, 2)]
            bound = ",".join(f"{src}:{p}:{o}" for p, o in enumerate(ends) if o >= 0)
            r = http.get(
                "/stores/click-counts/keys/u3",
                params={"min_position": bound, "timeout_ms": 180_000},
            )
            assert r.status_code == 200, r.text
            assert r.json()["value"] == want["u3"]
            assert r.json()["position"] == {src: {str(p): o for p, o in enumerate(ends) if o >= 0}}

            r = http.get("/stores/click-counts/all")
            assert [(e["key"], e["value"]) for e in r.json()["entries"]] == sorted(want.items())
            assert http.get("/stores/click-counts/keys/nobody").status_code == 404

            stores = http.get("/stores").json()["stores"]
            assert [(s["name"], s["key_serde"], s["value_serde"]) for s in stores] == [
                ("click-counts", "String", "Long")
            ]
            assert stores[0]["approximate_num_entries"] == len(want)

            meta = http.get("/metadata").json()
            assert meta["application_id"] == app.config.application_id
            assert meta["application_server"] == address
            assert meta["state"] == "RUNNING"
            assert meta["stores"][0]["source_partitions"] == [
                {"topic": src, "partition": p} for p, o in enumerate(ends) if o >= 0
            ]
    finally:
        app.close()
    with pytest.raises(httpx.ConnectError):  # close() stopped the server
        httpx.get(f"http://{address}/stores")


def _end_offsets(bs, topic, partitions):
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bs, "group.id": "http-test-offsets"})
    try:
        return [
            c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        ]
    finally:
        c.close()
