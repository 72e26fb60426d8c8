"""A table read from Debezium change events (Serdes.debezium_key / debezium_json), in the
TopologyTestDriver: upserts, deletes, tombstones, and bad events through the handler."""

from __future__ import annotations

import json

import pytest

from streamtable import Serdes, StreamsBuilder
from streamtable.errors import StreamsError
from streamtable.testing import TopologyTestDriver

PLAYER = Serdes.debezium_json({"id": "string", "status": "string"})


def _status(trade, player):
    return {"trade": trade["n"], "status": None if player is None else player["status"]}


def _topology():
    b = StreamsBuilder()
    players = b.table("cdc.public.players", key_serde=Serdes.debezium_key("id"), value_serde=PLAYER)
    trades = b.stream("trades", key_serde=Serdes.string(), value_serde=Serdes.json())
    trades.left_join(players, _status).to("out", value_serde=Serdes.json())
    return b.build()


def _event(op, after=None, before=None):
    return json.dumps({"before": before, "after": after, "op": op, "source": {}}).encode()


def test_change_events_are_upserts_and_deletes(spark):
    config = {"deserialization.exception.handler": "log_and_continue"}
    with TopologyTestDriver(_topology(), config) as driver:
        cdc = driver.create_input_topic("cdc.public.players", Serdes.bytes(), Serdes.bytes())
        trades = driver.create_input_topic("trades", Serdes.string(), Serdes.json())
        out = driver.create_output_topic("out", Serdes.string(), Serdes.json())
        key = b'{"id":"p1"}'
        cdc.pipe_input(key, _event("r", {"id": "p1", "status": "active"}), 1)
        trades.pipe_input("p1", {"n": 1}, 2)
        cdc.pipe_input(key, _event("u", {"id": "p1", "status": "banned"}), 3)
        trades.pipe_input("p1", {"n": 2}, 4)
        cdc.pipe_input(key, _event("d", None, {"id": "p1"}), 5)
        trades.pipe_input("p1", {"n": 3}, 6)
        cdc.pipe_input(key, _event("c", {"id": "p1", "status": "new"}), 7)
        cdc.pipe_input(key, _event("t"), 8)  # a truncate: skipped by the handler
        cdc.pipe_input(key, _event("u", {"id": "p1", "status": "x", "rank": 1}), 9)  # new column
        trades.pipe_input("p1", {"n": 4}, 10)
        cdc.pipe_input(key, None, 11)  # the tombstone Debezium sends after a delete
        trades.pipe_input("p1", {"n": 5}, 12)
        assert out.read_key_values_to_list() == [
            ("p1", {"trade": 1, "status": "active"}),
            ("p1", {"trade": 2, "status": "banned"}),
            ("p1", {"trade": 3, "status": None}),
            ("p1", {"trade": 4, "status": "new"}),  # the two bad events changed nothing
            ("p1", {"trade": 5, "status": None}),
        ]


def test_a_schema_change_fails_the_application_naming_the_record_by_default(spark):
    with TopologyTestDriver(_topology()) as driver:
        cdc = driver.create_input_topic("cdc.public.players", Serdes.bytes(), Serdes.bytes())
        with pytest.raises(StreamsError, match=r"the row has columns \['id', 'rank', 'status'\]"):
            cdc.pipe_input(b'{"id":"p1"}', _event("u", {"id": "p1", "status": "x", "rank": 1}), 1)
