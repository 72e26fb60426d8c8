"""The Kafka clients a worker process keeps between batches are closed once left unused."""

import gc
import time

import pytest
from confluent_kafka import Consumer, Producer

from streamtable.runtime import task_output
from streamtable.runtime.task_output import CLIENT_IDLE_S, TaskOutput, close_idle_clients

pytestmark = pytest.mark.unit

NEVER_CONNECTED = {"bootstrap.servers": "127.0.0.1:1", "log_level": 0}


@pytest.fixture(autouse=True)
def _empty_caches():
    task_output.close_cached_clients()
    yield
    task_output.close_cached_clients()


def idle(cache, key):
    """Make the cached client look unused for longer than the idle time."""
    task_output._last_used[(cache, key)] -= CLIENT_IDLE_S + 1


def test_clients_unused_for_the_idle_time_are_closed_and_the_others_kept():
    stale, fresh = Producer(NEVER_CONNECTED), Producer(NEVER_CONNECTED)
    task_output._keep_transactional("old-app-Counts-sink-0", stale)
    task_output._initialized_here.add("old-app-Counts-sink-0")
    spec = task_output.OutputSpec("old-app", "Counts-sink", dict(NEVER_CONNECTED))
    consumer = task_output._marker_consumer(spec, "old-app-eos-Counts-sink-0")
    assert isinstance(consumer, Consumer)
    idle("transactional producer", "old-app-Counts-sink-0")
    idle("marker consumer", ("127.0.0.1:1", "old-app-eos-Counts-sink-0"))
    task_output._keep_transactional("app-Counts-sink-0", fresh)  # used just now

    assert close_idle_clients() == 2
    assert task_output._txn_producers == {"app-Counts-sink-0": fresh}
    assert task_output._consumers == {}
    assert "old-app-Counts-sink-0" not in task_output._initialized_here
    with pytest.raises(RuntimeError):
        consumer.poll(0)  # closed
    assert close_idle_clients() == 0  # once
    assert close_idle_clients(now=time.monotonic() + CLIENT_IDLE_S + 1) == 1  # the fresh one


def test_a_client_handed_out_again_starts_its_idle_time_afresh():
    spec = task_output.OutputSpec("app", "Counts-sink", dict(NEVER_CONNECTED))
    first = task_output._marker_consumer(spec, "app-eos-Counts-sink-1")
    idle("marker consumer", ("127.0.0.1:1", "app-eos-Counts-sink-1"))
    assert task_output._marker_consumer(spec, "app-eos-Counts-sink-1") is first  # cached
    assert close_idle_clients() == 0
    assert task_output._consumers == {("127.0.0.1:1", "app-eos-Counts-sink-1"): first}


def test_an_open_task_output_keeps_its_clients_and_opening_one_closes_idle_ones():
    spec = task_output.OutputSpec("app", "Words-sink", dict(NEVER_CONNECTED))
    stale = Producer(NEVER_CONNECTED)
    task_output._keep_transactional("old-app-Counts-sink-0", stale)
    idle("transactional producer", "old-app-Counts-sink-0")
    out = TaskOutput(spec)
    assert out.replayed is False  # opens it: an at-least-once producer, never connected
    assert task_output._txn_producers == {}  # the stale one went when it opened
    (key,) = task_output._plain_producers
    idle("producer", key)  # a task running for longer than the idle time
    assert close_idle_clients() == 0
    assert task_output._plain_producers[key] is out._producer
    del out
    gc.collect()
    assert close_idle_clients() == 1
    assert task_output._plain_producers == {}
