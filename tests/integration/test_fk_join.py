"""The KTable-KTable foreign-key join end to end: orders (keyed by order id, referencing a
customer) joined to customers, on a real broker and Spark; final tables checked per key."""

import json
from datetime import timedelta

import pytest

from _support import ensure_topics, produce_records, read_topic
from streamtable import KafkaStreams, Serdes, StreamsBuilder
from streamtable.errors import StreamsError
from streamtable.runtime.kafka_streams import State

S = Serdes.string()


def order(key, customer, item, ts):
    value = {"item": item} if customer is None else {"customer": customer, "item": item}
    return (key.encode(), json.dumps(value).encode(), ts)


def tomb(key, ts):
    return (key.encode(), None, ts)


def customer(key, name, ts):
    return (key.encode(), None if name is None else name.encode(), ts)


ORDERS = [
    order("o1", "c1", "book", 5),
    order("o2", "c2", "pen", 6),
    order("o3", "c3", "cup", 7),
    order("o4", "c9", "hat", 8),  # no such customer
    order("o5", None, "mug", 9),  # no customer at all: a null foreign key
    order("o1", "c2", "book", 10),  # o1 moves from c1 to c2
    order("o6", "c1", "ink", 11),
    tomb("o6", 12),
]
CUSTOMERS = [
    customer("c1", "Ann", 1),
    customer("c2", "Bob", 2),
    customer("c3", "Cid", 3),
    customer("c2", "Bobby", 20),  # fans out to o1 and o2
    customer("c3", None, 21),  # o3 loses its customer
]
EXPECTED = {
    "join": {"o1": "book for Bobby", "o2": "pen for Bobby"},
    "left_join": {
        "o1": "book for Bobby",
        "o2": "pen for Bobby",
        "o3": "cup for None",
        "o4": "hat for None",
        "o5": "mug for None",
    },
}


def final_table(records):
    table = {}
    for k, v, _ in records:
        if v is None:
            table.pop(k.decode(), None)
        else:
            table[k.decode()] = v.decode()
    return table


def enrich(orders_topic, customers_topic, out, method, extractor):
    b = StreamsBuilder()
    orders = b.table(orders_topic, key_serde=S, value_serde=Serdes.json())
    customers = b.table(customers_topic, key_serde=S, value_serde=S)
    joined = getattr(orders, method)(
        customers,
        lambda o, name: f"{o['item']} for {name}",
        foreign_key_extractor=extractor,
        name="enrich",
    )
    joined.to_stream().to(out, value_serde=S)
    return b.build()


@pytest.mark.parametrize(
    ("method", "per_trigger"), [("join", None), ("join", 1), ("left_join", None)]
)
def test_orders_joined_to_their_customers(
    kafka_broker, spark, topic_name, app_config, method, per_trigger
):
    bs = kafka_broker.bootstrap_servers
    ot, ct, out = topic_name("orders"), topic_name("customers"), topic_name("out")
    # not co-partitioned on purpose: the foreign-key join redistributes both sides
    ensure_topics(bs, {ot: 2, ct: 3, out: 1})
    produce_records(bs, ct, CUSTOMERS)
    produce_records(bs, ot, ORDERS)
    topology = enrich(ot, ct, out, method, lambda o: o.get("customer"))
    extra = {} if per_trigger is None else {"streamtable.max.offsets.per.trigger": per_trigger}
    app = KafkaStreams(topology, app_config(**extra))
    app.start()
    try:
        app.await_caught_up(timeout=timedelta(minutes=3))
        metrics = app.metrics()
    finally:
        app.close()
    assert final_table(read_topic(bs, out)) == EXPECTED[method]
    # Kafka Streams counts an inner join's null foreign key as a dropped record
    dropped = metrics["dropped-records"].get("null_foreign_key")
    assert dropped == (1 if method == "join" else None)


def test_extractor_error_names_operator_and_record(kafka_broker, spark, topic_name, app_config):
    bs = kafka_broker.bootstrap_servers
    ot, ct, out = topic_name("orders"), topic_name("customers"), topic_name("out")
    ensure_topics(bs, {ot: 1, ct: 1, out: 1})
    produce_records(bs, ct, CUSTOMERS[:1])
    produce_records(bs, ot, [order("o1", "c1", "book", 5), order("o2", None, "pen", 6)])
    app = KafkaStreams(enrich(ot, ct, out, "join", lambda o: o["customer"]), app_config())
    app.start()
    # the join named "enrich" is Kafka Streams' processor "enrich-result" (as describe() shows)
    with pytest.raises(
        StreamsError,
        match=rf"KeyError: 'customer' in operator 'enrich-result' \(foreign_key_extractor\) on the "
        rf"record at topic '{ot}' partition 0 offset 1",
    ):
        app.await_caught_up(timeout=timedelta(minutes=2))
    assert app.state is State.ERROR
    app.close()
