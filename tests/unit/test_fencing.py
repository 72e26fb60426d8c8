"""The producers that fence an exactly_once_v2 application's transactional ids at start."""

from streamtable.config import StreamsConfig
from streamtable.runtime.fencing import fencing_config
from streamtable.runtime.task_output import output_spec


def _spec(**extra):
    config = StreamsConfig.from_mapping(
        {
            "application.id": "app",
            "bootstrap.servers": "localhost:9092",
            "processing.guarantee": "exactly_once_v2",
            **extra,
        }
    )
    return output_spec(config, "q.sink")


def test_a_fencing_producer_logs_only_librdkafka_errors_by_default():
    # its warnings are retried steps of init_transactions, printed on the user's console
    conf = fencing_config(_spec(), "app-q.sink-0")
    assert conf["log_level"] == 3
    assert conf["transactional.id"] == "app-q.sink-0"
    assert conf["bootstrap.servers"] == "localhost:9092"


def test_a_fencing_producer_keeps_the_users_log_level():
    assert fencing_config(_spec(**{"producer.log_level": 7}), "t")["log_level"] == 7
