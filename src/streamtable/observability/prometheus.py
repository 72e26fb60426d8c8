"""The metrics of :meth:`KafkaStreams.metrics` in Prometheus' text format, served over HTTP.

With ``streamtable.metrics.address`` set, :meth:`KafkaStreams.start` serves ``/metrics`` on that
address (:class:`MetricsServer`) and :meth:`KafkaStreams.close` stops it. Each scrape reads the
application's metrics afresh through :class:`MetricsCollector`, registered in a registry of its
own (not ``prometheus_client``'s global one), so several applications can serve in one process.

Names follow what Prometheus' JMX exporter makes of Kafka's MBeans, so that queries written for
Kafka Streams carry over: ``<domain>_<group>_<name>`` with every character other than a letter,
digit or underscore replaced by ``_`` (``process-rate`` of group ``stream-thread-metrics``
becomes ``kafka_streams_stream_thread_metrics_process_rate``; the consumer's ``records-lag``
becomes ``kafka_consumer_consumer_fetch_manager_metrics_records_lag``); streamtable's own
metrics are ``streamtable_<name>``. A metric whose name ends in ``-total`` is a counter (its
sample ends in ``_total``), the others are gauges. Tags become labels (``state-id`` →
``state_id``), and every sample has the label ``application_id``.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from streamtable.config import split_host_port
from streamtable.errors import StreamsError
from streamtable.runtime.metrics import STREAMTABLE_GROUP
from streamtable.runtime.metrics import Metric as StreamsMetric

log = logging.getLogger("streamtable")

_INVALID = re.compile(r"[^a-zA-Z0-9_]")


def prometheus_name(metric: StreamsMetric) -> str:
    """The Prometheus name of a metric (without the ``_total`` a counter's sample gets).

    >>> from streamtable.runtime.metrics import Metric
    >>> prometheus_name(Metric("process-rate", "stream-thread-metrics", {}, 0.0, ""))
    'kafka_streams_stream_thread_metrics_process_rate'
    >>> prometheus_name(Metric("records-lag", "consumer-fetch-manager-metrics", {}, 0.0, ""))
    'kafka_consumer_consumer_fetch_manager_metrics_records_lag'
    >>> prometheus_name(Metric("replayed-records-total", "streamtable-metrics", {}, 0.0, ""))
    'streamtable_replayed_records'
    """
    if metric.group == STREAMTABLE_GROUP:
        domain = "streamtable"
    elif metric.group.startswith("consumer-"):
        domain = f"kafka_consumer_{metric.group}"
    else:
        domain = f"kafka_streams_{metric.group}"
    name = metric.name.removesuffix("-total") if metric.is_counter else metric.name
    return _INVALID.sub("_", f"{domain}_{name}")


def label_name(tag: str) -> str:
    """A tag's Prometheus label name.

    >>> label_name("state-id")
    'state_id'
    """
    return _INVALID.sub("_", tag)


class MetricsCollector(Collector):
    """A Prometheus collector reading an application's metrics at every scrape.

    Parameters
    ----------
    source : callable
        Returns the current metrics (:meth:`KafkaStreams.metrics` ``["metrics"]``).
    application_id : str
        The value of the ``application_id`` label of every sample.
    """

    def __init__(self, source: Callable[[], Iterable[StreamsMetric]], application_id: str):
        self._source = source
        self._application_id = application_id

    def describe(self) -> list[Metric]:
        """Nothing up front: the metrics depend on the running queries."""
        return []

    def collect(self) -> Iterator[Metric]:
        """One family per metric name, one sample per tag set."""
        families: dict[str, tuple[Any, list[str]]] = {}
        for m in self._source():
            labels = {"application_id": self._application_id}
            labels.update({label_name(k): str(v) for k, v in m.tags.items()})
            name = prometheus_name(m)
            entry = families.get(name)
            if entry is None:
                keys = list(labels)
                kind = CounterMetricFamily if m.is_counter else GaugeMetricFamily
                entry = families[name] = (kind(name, m.description, labels=keys), keys)
            family, keys = entry
            family.add_metric([labels.get(k, "") for k in keys], float(m.value))
        for family, _ in families.values():
            yield family


class MetricsServer:
    """Serves a :class:`MetricsCollector` at ``http://<address>/metrics`` in a daemon thread.

    Parameters
    ----------
    address : str
        ``host:port`` (``streamtable.metrics.address``).
    collector : Collector
        What to serve; registered in a registry of this server only.
    """

    def __init__(self, address: str, collector: Collector) -> None:
        self.address = address
        self.host, self.port = split_host_port(address)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(collector)
        self._httpd: Any = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """``http://<address>/metrics``."""
        return f"http://{self.address}/metrics"

    def start(self) -> None:
        """Bind the address and serve.

        Raises
        ------
        StreamsError
            When the address cannot be bound (the port is in use, or the host is not an
            address of this machine); the message names the address and the config key.
        """
        from prometheus_client.exposition import start_http_server

        try:
            self._httpd, self._thread = start_http_server(
                self.port, addr=self.host, registry=self.registry
            )
        except OSError as e:
            raise StreamsError(
                f"Cannot serve Prometheus metrics on {self.address!r} (config "
                f"'streamtable.metrics.address'): {e}. Choose a free port on an address of "
                "this machine."
            ) from e
        log.info("streamtable: serving Prometheus metrics on %s", self.url)

    def stop(self) -> None:
        """Stop serving and free the address (idempotent)."""
        httpd, self._httpd = self._httpd, None
        thread, self._thread = self._thread, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if thread is not None:
            thread.join(10.0)
