"""Client options of Spark's Kafka source that every streamtable source gets.

Spark's Kafka source asks a driver-side admin client for the partitions' latest offsets at the
start of every micro-batch. When the leader of a source partition dies while the query is idle,
that request can be routed to the dead broker; the Kafka admin client (kafka-clients 3.9, the
version Spark's connector ships) then waits for a node assignment until
``default.api.timeout.ms`` (60 s by default) fails the call, and Spark's retry, with a new admin
client, then finds the new leader at once. The query stalls for that minute (61 s in 4 of 4
kills measured on 3 brokers).

streamtable therefore bounds the source's client calls by :data:`SOURCE_API_TIMEOUT_MS` and
each request by :data:`SOURCE_REQUEST_TIMEOUT_MS`, and lets Spark try more often, so that a
broker that stays unreachable still fails the query after about the same time as with Spark's
defaults (three attempts of 60 s). The same settings reach the executors' consumers (Spark
cannot tell them apart); their offset lookups after each poll get the same bound, which is why
the API timeout is twice the request timeout and longer than a broker's session timeout (9 s by
default in KRaft). The application's ``consumer.*`` settings win over these defaults.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

#: Bound of one request of the source's admin client and consumers (ms); Kafka's default is
#: 30 s (``request.timeout.ms``).
SOURCE_REQUEST_TIMEOUT_MS = 10_000
#: Bound of one client call, retries included (ms): an offset lookup of the driver's admin
#: client or an executor's consumer; Kafka's default is 60 s (``default.api.timeout.ms``).
SOURCE_API_TIMEOUT_MS = 20_000
#: How long Spark's offset requests are retried before the query fails (ms): Spark's own
#: default, three attempts of the clients' default 60 s.
OFFSET_FETCH_BUDGET_MS = 180_000
#: Spark's pause between two attempts (``fetchOffset.retryIntervalMs``, ms).
_RETRY_INTERVAL_MS = 1_000


def _ms(consumer_config: Mapping[str, Any], key: str) -> int | None:
    value = consumer_config.get(key)
    return None if value is None else int(value)  # StreamsConfig checked it: an int >= 1


def kafka_source_options(consumer_config: Mapping[str, Any]) -> dict[str, str]:
    """Options for ``spark.readStream.format("kafka")`` from the app's ``consumer.*`` config.

    Parameters
    ----------
    consumer_config : Mapping[str, Any]
        The application's ``consumer.*`` settings, prefix removed (``StreamsConfig.
        consumer_config``, whose parsing checked that the two timeouts are ints >= 1); each
        one that is not ``None`` becomes a ``kafka.``-prefixed option and wins over the
        defaults below.

    Returns
    -------
    dict[str, str]
        ``kafka.request.timeout.ms`` (default :data:`SOURCE_REQUEST_TIMEOUT_MS`) and
        ``kafka.default.api.timeout.ms`` (default :data:`SOURCE_API_TIMEOUT_MS`), kept
        consistent (Kafka's admin client refuses an API timeout below the request timeout);
        ``fetchOffset.numRetries``, enough attempts of that API timeout to cover
        :data:`OFFSET_FETCH_BUDGET_MS` (at least Spark's 3); and every other ``consumer.*``
        setting.

    Examples
    --------
    >>> opts = kafka_source_options({})
    >>> opts["kafka.request.timeout.ms"], opts["kafka.default.api.timeout.ms"]
    ('10000', '20000')
    >>> opts["fetchOffset.numRetries"]
    '9'
    >>> opts = kafka_source_options({"request.timeout.ms": "40000", "max.poll.records": 500})
    >>> opts["kafka.default.api.timeout.ms"], opts["fetchOffset.numRetries"]
    ('40000', '5')
    >>> kafka_source_options({"default.api.timeout.ms": 5000})["kafka.request.timeout.ms"]
    '5000'
    """
    request = _ms(consumer_config, "request.timeout.ms")
    api = _ms(consumer_config, "default.api.timeout.ms")
    if request is None:
        request = SOURCE_REQUEST_TIMEOUT_MS if api is None else min(SOURCE_REQUEST_TIMEOUT_MS, api)
    if api is None:
        api = max(SOURCE_API_TIMEOUT_MS, request)
    attempts = math.ceil(OFFSET_FETCH_BUDGET_MS / (api + _RETRY_INTERVAL_MS))
    options = {
        "kafka.request.timeout.ms": str(request),
        "kafka.default.api.timeout.ms": str(api),
        "fetchOffset.numRetries": str(max(3, attempts)),
    }
    options.update({f"kafka.{k}": str(v) for k, v in consumer_config.items() if v is not None})
    return options
