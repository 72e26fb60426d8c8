"""Records that Python tasks would write to Kafka, kept in a folder instead (test driver mode).

Under the :class:`~streamtable.testing.TopologyTestDriver` there is no broker: the output stages
that production runs through :class:`~streamtable.runtime.task_output.TaskOutput` (late records,
dead letters) write each task's records to one file in a *capture folder*, and the driver reads
the files back, in the order they were written, after each piped record.

>>> import tempfile
>>> folder = tempfile.mkdtemp()
>>> write_captured(folder, [("late", b"k", b"v", 5, [("reason", b"late")])])
>>> read_captured(folder, set())
[('late', b'k', b'v', 5, [('reason', b'late')])]
"""

from __future__ import annotations

import os
import pickle
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: (topic, key, value, timestamp ms or None, headers)
CapturedRecord = tuple[str, bytes | None, bytes | None, int | None, list[tuple[str, bytes]]]


def write_captured(folder: str, records: Sequence[CapturedRecord]) -> None:
    """Write one task's records as one file, atomically (nothing when ``records`` is empty)."""
    if not records:
        return
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    name = f"{time.time_ns():020d}-{uuid.uuid4().hex}"
    tmp = path / f".{name}.tmp"
    tmp.write_bytes(pickle.dumps(list(records)))
    os.replace(tmp, path / name)


def read_captured(folder: str, seen: set[str]) -> list[CapturedRecord]:
    """The records of the files not in ``seen``, in write order; adds their names to ``seen``."""
    path = Path(folder)
    if not path.is_dir():
        return []
    out: list[CapturedRecord] = []
    for name in sorted(n for n in os.listdir(path) if not n.startswith(".")):
        if name in seen:
            continue
        seen.add(name)
        out.extend(pickle.loads((path / name).read_bytes()))
    return out


class CaptureProducer:
    """The slice of confluent-kafka's ``Producer`` that ``TaskOutput`` uses, into a folder."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self._records: list[CapturedRecord] = []

    def produce(self, topic: str, **kwargs: Any) -> None:
        """Buffer one record (delivery is reported as successful on :meth:`flush`)."""
        self._records.append(
            (
                topic,
                kwargs.get("key"),
                kwargs.get("value"),
                kwargs.get("timestamp"),
                list(kwargs.get("headers") or []),
            )
        )

    def poll(self, timeout: float = 0) -> int:
        """Nothing to serve."""
        return 0

    def flush(self, timeout: float = 0) -> int:
        """Write the buffered records; returns 0 (none left undelivered)."""
        records, self._records = self._records, []
        write_captured(self.folder, records)
        return 0
