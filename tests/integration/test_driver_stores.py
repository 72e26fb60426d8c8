"""TopologyTestDriver state stores: every materialized store read from the query's checkpoint
(Spark's ``statestore`` source) between pipes — key-value, window and session stores.
"""

from datetime import timedelta

import pytest

from streamtable import Serdes, SessionWindows, StreamsBuilder, Suppressed, TimeWindows, Windowed
from streamtable.errors import TopologyError
from streamtable.testing import TopologyTestDriver

S, L = Serdes.string(), Serdes.long()


def test_reduce_store_get_all_range_in_key_byte_order(spark):
    b = StreamsBuilder()
    (
        b.stream("in", key_serde=L, value_serde=S)
        .group_by_key(key_serde=L, value_serde=S)
        .reduce(lambda agg, v: agg + v, name="Joined")
        .to_stream()
        .to("out", key_serde=L, value_serde=S)
    )
    with TopologyTestDriver(b.build()) as driver:
        inp = driver.create_input_topic("in", L, S)
        store = driver.get_key_value_store("Joined")
        assert store.all() == [] and store.get(10) is None
        inp.pipe_input(10, "a", timestamp=1)
        assert store.get(10) == "a"
        inp.pipe_key_value_list([(-1, "b"), (2, "c"), (10, "d")])
        # Long keys are big-endian two's complement: -1 (0xff...) sorts after 10
        assert store.all() == [(2, "c"), (10, "ad"), (-1, "b")]
        assert store.reverse_all() == [(-1, "b"), (10, "ad"), (2, "c")]
        assert store.range(2, 10) == [(2, "c"), (10, "ad")]
        assert store.range(10, -1) == [(10, "ad"), (-1, "b")]
        assert store.range(3) == [(10, "ad"), (-1, "b")]
        assert store.get(10) == "ad" and store.get(99) is None
        assert store.approximate_num_entries() == 3
        # read once per committed micro-batch: the cache holds the last batch's contents
        batch, entries = driver._store_cache.contents["Joined"]
        assert store.get(-1) == "b"
        assert driver._store_cache.contents["Joined"] == (batch, entries)
        with pytest.raises(TopologyError, match=r"'Joined' is a key-value store.*get_key_value"):
            driver.get_window_store("Joined")


def test_built_in_reducer_stores_read_from_sparks_aggregation_state(spark):
    """Built-in reducers over Long and Integer values keep their state in Spark's own
    aggregation; the driver's stores read each key's aggregate from it (not the timestamp's
    buffer beside it), negative values included, and the outputs agree.
    """
    from streamtable import Reducers
    from streamtable.topology.nodes import AggregateNode

    integer = Serdes.integer()
    b = StreamsBuilder()
    stream = b.stream("in", key_serde=S, value_serde=L)
    stream.group_by_key(key_serde=S, value_serde=L).reduce(
        Reducers.max(), name="Max"
    ).to_stream().to("max", key_serde=S, value_serde=L)
    stream.map_values(lambda v: None if v is None else v * 2).group_by_key(
        key_serde=S, value_serde=integer
    ).reduce(Reducers.sum(), name="Sum").to_stream().to("sum", key_serde=S, value_serde=integer)
    topology = b.build()
    natives = {
        n.store_name: n.aggregation.native
        for n in topology._graph.nodes
        if isinstance(n, AggregateNode) and n.aggregation is not None
    }
    assert natives == {"Max": "max", "Sum": "sum"}  # Spark's aggregation, not a Python fold
    with TopologyTestDriver(topology) as driver:
        inp = driver.create_input_topic("in", S, L)
        inp.pipe_key_value_list([("a", -7), ("b", 3), ("a", -2), ("b", None), ("a", -9)])
        assert driver.get_key_value_store("Max").all() == [("a", -2), ("b", 3)]
        assert driver.get_key_value_store("Sum").all() == [("a", -36), ("b", 6)]
        assert driver.create_output_topic("max", S, L).read_key_values_to_map() == {
            "a": -2,
            "b": 3,
        }
        assert driver.create_output_topic("sum", S, integer).read_key_values_to_map() == {
            "a": -36,
            "b": 6,
        }


def test_table_aggregation_and_source_table_stores_after_regrouping(spark):
    b = StreamsBuilder()
    (
        b.table("people", key_serde=S, value_serde=S, name="People")
        .group_by(lambda person, team: (team, person), key_serde=S, value_serde=S)
        .aggregate(
            lambda: "",
            lambda team, person, members: members + person[0],
            lambda team, person, members: members.replace(person[0], ""),
            name="Members",
        )
        .to_stream()
        .to("teams", key_serde=S, value_serde=S)
    )
    with TopologyTestDriver(b.build()) as driver:
        inp = driver.create_input_topic("people", S, S)
        members = driver.get_key_value_store("Members")
        people = driver.get_key_value_store("People")
        inp.pipe_key_value_list([("carol", "E"), ("bob", "E"), ("carol", "A")])
        # two stateful operators in one query (the table, then its aggregation)
        assert members.all() == [("A", "c"), ("E", "b")]
        assert people.all() == [("bob", "E"), ("carol", "A")]
        assert people.get("carol") == "A"
        inp.pipe_input("bob", None)  # a tombstone leaves the table and its group
        assert people.all() == [("carol", "A")]
        assert members.get("E") == ""


def test_windowed_count_store_fetch_over_a_range_and_retention(spark):
    b = StreamsBuilder()
    (
        b.stream("clicks", key_serde=S, value_serde=S)
        .group_by_key(key_serde=S, value_serde=S)
        .windowed_by(TimeWindows.of_size_and_grace(timedelta(seconds=10), timedelta(seconds=20)))
        .count(name="Clicks")
        .suppress(Suppressed.until_window_closes(), name="final")
        .to_stream()
        .to("out", key_serde=Serdes.time_windowed(S, 10_000), value_serde=L)
    )
    with TopologyTestDriver(b.build()) as driver:
        inp = driver.create_input_topic("clicks", S, S)
        store = driver.get_window_store("Clicks")
        inp.pipe_input("a", "x", timestamp=1_000)
        inp.pipe_input("a", "x", timestamp=12_000)
        inp.pipe_input("b", "x", timestamp=5_000)
        assert store.fetch("a", 0, 10_000) == [(0, 1), (10_000, 1)]
        assert store.fetch("a", 5_000, 20_000) == [(10_000, 1)]
        assert store.fetch("b") == [(0, 1)]
        assert store.fetch_value("a", 10_000) == 1 and store.fetch_value("a", 20_000) is None
        assert store.fetch_all(0, 5_000) == [
            (Windowed("a", 0, 10_000), 1),
            (Windowed("b", 0, 10_000), 1),
        ]
        assert len(store.all()) == 3
        # retention (size + grace = 30 s after the window start): the early windows leave
        inp.pipe_input("a", "x", timestamp=45_000)
        assert store.all() == [(Windowed("a", 40_000, 50_000), 1)]
        with pytest.raises(TopologyError, match=r"'Clicks' is a window store.*get_window_store"):
            driver.get_key_value_store("Clicks")
        with pytest.raises(TopologyError, match=r"no state store 'clicks'.*'Clicks'"):
            driver.get_window_store("clicks")
        (buffer,) = set(driver.topology.store_names) - {"Clicks"}
        with pytest.raises(
            TopologyError,
            match=rf"{buffer!r} cannot be read.*cannot yet, though Kafka Streams' "
            r"TopologyTestDriver reads every store\); the readable stores are \['Clicks'\]",
        ):
            driver.get_key_value_store(buffer)


def test_session_store_fetch(spark):
    b = StreamsBuilder()
    (
        b.stream("visits", key_serde=S, value_serde=S)
        .group_by_key(key_serde=S, value_serde=S)
        .windowed_by(
            SessionWindows.of_inactivity_gap_and_grace(timedelta(seconds=5), timedelta(seconds=10))
        )
        .count(name="Sessions")
        .to_stream()
        .to("out", key_serde=Serdes.session_windowed(S), value_serde=L)
    )
    with TopologyTestDriver(b.build()) as driver:
        inp = driver.create_input_topic("visits", S, S)
        store = driver.get_session_store("Sessions")
        inp.pipe_input("a", "x", timestamp=1_000)
        inp.pipe_input("a", "x", timestamp=3_000)  # merges into [1000, 3000]
        inp.pipe_input("a", "x", timestamp=12_000)  # a new session
        assert store.fetch("a") == [
            (Windowed("a", 1_000, 3_000), 2),
            (Windowed("a", 12_000, 12_000), 1),
        ]
        assert store.fetch("b") == []
        assert store.fetch_session("a", 1_000, 3_000) == 2
        assert store.find_sessions("a", 10_000, 20_000) == [(Windowed("a", 12_000, 12_000), 1)]
        with pytest.raises(TopologyError, match=r"'Sessions' is a session store.*get_session"):
            driver.get_window_store("Sessions")


def test_table_store_of_a_stream_table_join(spark):
    b = StreamsBuilder()
    rates = b.table("rates", key_serde=S, value_serde=S, name="Rates")
    (
        b.stream("orders", key_serde=S, value_serde=S)
        .join(rates, lambda order, rate: f"{order}@{rate}")
        .to("priced", key_serde=S, value_serde=S)
    )
    with TopologyTestDriver(b.build()) as driver:
        inp = driver.create_input_topic("rates", S, S)
        store = driver.get_key_value_store("Rates")
        inp.pipe_key_value_list([("usd", "1.0"), ("eur", "1.1")])
        assert store.all() == [("eur", "1.1"), ("usd", "1.0")]
        inp.pipe_input("usd", None)  # a tombstone deletes
        assert store.all() == [("eur", "1.1")] and store.get("usd") is None
