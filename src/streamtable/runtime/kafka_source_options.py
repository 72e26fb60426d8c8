"""Client options of Spark's Kafka source that every streamtable source gets.

Spark's Kafka source asks a driver-side admin client for the partitions' latest offsets at the
start of every micro-batch. When the leader of a source partition dies while the query is idle,
that request can be routed to the dead broker; the Kafka admin client (kafka-clients 3.9, the
version Spark's connector ships) then waits for a node assignment until
``default.api.timeout.ms`` (60 s by default) fails the call, and Spark's retry then finds the new
leader at once. The query stalls for that minute: 61 s in 4 of 4 kills measured on 3 brokers,
against 11 s with these options.

streamtable therefore bounds each request of the source's clients by
:data:`SOURCE_REQUEST_TIMEOUT_MS` and lets Spark try more often, so that a broker that stays
unreachable still fails the query after about the same time as with Spark's defaults (three
attempts of 60 s). The application's ``consumer.*`` settings win over these defaults.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

#: Deadline of one request of the source's admin client and consumers (ms); Kafka's default
#: for both is 30 s (``request.timeout.ms``) and 60 s (``default.api.timeout.ms``).
SOURCE_REQUEST_TIMEOUT_MS = 10_000
#: How long Spark's offset requests are retried before the query fails (ms): Spark's own
#: default, three attempts of the clients' default 60 s.
OFFSET_FETCH_BUDGET_MS = 180_000


def kafka_source_options(consumer_config: Mapping[str, Any]) -> dict[str, str]:
    """Options for ``spark.readStream.format("kafka")`` from the app's ``consumer.*`` config.

    Parameters
    ----------
    consumer_config : Mapping[str, Any]
        The application's ``consumer.*`` settings, prefix removed (``StreamsConfig.
        consumer_config``); each becomes a ``kafka.``-prefixed option and wins over the
        defaults below.

    Returns
    -------
    dict[str, str]
        ``kafka.request.timeout.ms`` and ``kafka.default.api.timeout.ms`` (default
        :data:`SOURCE_REQUEST_TIMEOUT_MS` each, kept consistent: Kafka refuses an API timeout
        below the request timeout), ``fetchOffset.numRetries`` (enough attempts of that API
        timeout to cover :data:`OFFSET_FETCH_BUDGET_MS`, at least Spark's 3) and every
        ``consumer.*`` setting.

    Examples
    --------
    >>> opts = kafka_source_options({})
    >>> opts["kafka.default.api.timeout.ms"], opts["fetchOffset.numRetries"]
    ('10000', '18')
    >>> opts = kafka_source_options({"request.timeout.ms": 40000, "max.poll.records": 500})
    >>> opts["kafka.default.api.timeout.ms"], opts["fetchOffset.numRetries"]
    ('40000', '5')
    >>> kafka_source_options({"default.api.timeout.ms": 5000})["kafka.request.timeout.ms"]
    '5000'
    """
    request = consumer_config.get("request.timeout.ms")
    api = consumer_config.get("default.api.timeout.ms")
    if request is None:
        request = (
            SOURCE_REQUEST_TIMEOUT_MS if api is None else min(SOURCE_REQUEST_TIMEOUT_MS, int(api))
        )
    if api is None:
        api = max(SOURCE_REQUEST_TIMEOUT_MS, int(request))
    options = {
        "kafka.request.timeout.ms": str(request),
        "kafka.default.api.timeout.ms": str(api),
        "fetchOffset.numRetries": str(max(3, math.ceil(OFFSET_FETCH_BUDGET_MS / max(1, int(api))))),
    }
    options.update({f"kafka.{k}": str(v) for k, v in consumer_config.items()})
    return options
