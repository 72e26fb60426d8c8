"""streamtable's admin client facade, without a broker."""

import pytest

from streamtable.errors import StreamtableError
from streamtable.runtime.kafka_admin import KafkaAdmin


def test_a_closed_admin_client_says_so():
    admin = KafkaAdmin("127.0.0.1:1", timeout_ms=1000)
    admin.close()
    with pytest.raises(StreamtableError, match=r"admin client of '127.0.0.1:1' is closed"):
        admin.topic_partitions(["t"])
