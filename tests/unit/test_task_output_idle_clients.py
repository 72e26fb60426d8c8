"""The Kafka clients a worker process keeps between batches are closed once left unused."""

import time

import pytest
from confluent_kafka import Consumer, Producer

from streamtable.runtime import task_output
from streamtable.runtime.task_output import CLIENT_IDLE_S, close_idle_clients

pytestmark = pytest.mark.unit

NEVER_CONNECTED = {"bootstrap.servers": "127.0.0.1:1", "log_level": 0}


@pytest.fixture(autouse=True)
def _empty_caches():
    task_output.close_cached_clients()
    yield
    task_output.close_cached_clients()


def test_clients_unused_for_the_idle_time_are_closed_and_the_others_kept():
    stale, fresh = Producer(NEVER_CONNECTED), Producer(NEVER_CONNECTED)
    task_output._keep_transactional("old-app-Counts-sink-0", stale)
    task_output._initialized_here.add("old-app-Counts-sink-0")
    spec = task_output.OutputSpec("old-app", "Counts-sink", dict(NEVER_CONNECTED))
    consumer = task_output._marker_consumer(spec, "old-app-eos-Counts-sink-0")
    assert isinstance(consumer, Consumer)
    later = time.monotonic() + CLIENT_IDLE_S  # nothing used since
    task_output._keep_transactional("app-Counts-sink-0", fresh)  # used just now
    task_output._last_used[("transactional producer", "app-Counts-sink-0")] = later - 1

    assert close_idle_clients(now=later) == 2
    assert task_output._txn_producers == {"app-Counts-sink-0": fresh}
    assert task_output._consumers == {}
    assert "old-app-Counts-sink-0" not in task_output._initialized_here
    with pytest.raises(RuntimeError):
        consumer.poll(0)  # closed
    assert close_idle_clients(now=later) == 0  # once


def test_a_client_handed_out_again_starts_its_idle_time_afresh():
    spec = task_output.OutputSpec("app", "Counts-sink", dict(NEVER_CONNECTED))
    first = task_output._marker_consumer(spec, "app-eos-Counts-sink-1")
    start = time.monotonic()
    assert task_output._marker_consumer(spec, "app-eos-Counts-sink-1") is first  # cached
    assert close_idle_clients(now=start + CLIENT_IDLE_S / 2) == 0
    assert close_idle_clients(now=start + 2 * CLIENT_IDLE_S) == 1
    assert task_output._marker_consumer(spec, "app-eos-Counts-sink-1") is not first
