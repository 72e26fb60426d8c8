"""Running Kafka Streams (Java) reference apps and their streamtable twins side by side."""

from __future__ import annotations

import concurrent.futures
from datetime import timedelta
from pathlib import Path
from typing import Any

from _support import ensure_topics
from streamtable import KafkaStreams
from streamtable.reference.kafka_streams import run_reference


def run_side_by_side(
    bs: str, cases: dict[str, Any], prefix: str, suffix: str, tmp: Path, partitions: int
) -> dict[str, tuple[str, str, dict]]:
    """Run every case's Java reference app and streamtable twin on the same input topics.

    Each case has ``reference``, ``params``, ``inputs``, ``twin(output) -> Topology`` and
    ``ks_config``. The Java apps run two at a time in the background while the streamtable twins
    run one after the other (more would starve a 2-core box), each until it has caught up.

    Returns
    -------
    dict
        ``{case id: (Kafka Streams' output topic, streamtable's output topic, the Java runner's
        result)}``.
    """
    out = {cid: (f"{prefix}-{cid}-ks-{suffix}", f"{prefix}-{cid}-st-{suffix}") for cid in cases}
    ensure_topics(bs, {topic: partitions for pair in out.values() for topic in pair})
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        java = {
            cid: pool.submit(
                run_reference,
                case.reference,
                bootstrap_servers=bs,
                application_id=f"{prefix}-{cid}-{suffix}",
                params={**case.params, "output": out[cid][0]},
                input_topics=case.inputs,
                state_dir=str(tmp / f"ks-{cid}"),
                config=case.ks_config or None,
            )
            for cid, case in cases.items()
        }
        for cid, case in cases.items():
            app = KafkaStreams(
                case.twin(out[cid][1]),
                {
                    "application.id": f"{prefix}-{cid}-st-{suffix}",
                    "bootstrap.servers": bs,
                    "state.dir": str(tmp / f"st-{cid}"),
                    "streamtable.shuffle.partitions": partitions,
                    "commit.interval.ms": 200,
                },
            )
            app.start()
            try:
                app.await_caught_up(timeout=timedelta(minutes=3))
            finally:
                app.close()
        return {cid: (*out[cid], java[cid].result()) for cid in cases}
