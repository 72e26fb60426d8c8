"""Counting the records of an interrupted micro-batch a restart processes again."""

from __future__ import annotations

import json

from streamtable.runtime.starting_offsets import pending_batch_records


def _offsets(query, batch: int, positions: dict) -> None:
    (query / "offsets").mkdir(parents=True, exist_ok=True)
    meta = json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 0})
    body = f"v1\n{meta}\n{json.dumps(positions)}\n"
    (query / "offsets" / str(batch)).write_text(body)


def _commit(query, batch: int) -> None:
    (query / "commits").mkdir(parents=True, exist_ok=True)
    (query / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}\n')


def test_an_uncommitted_batch_counts_its_offset_ranges(tmp_path):
    q = tmp_path / "q"
    _offsets(q, 0, {"in": {"0": 10, "1": 5}})
    _commit(q, 0)
    _offsets(q, 1, {"in": {"0": 25, "1": 5}, "other": {"0": 3}})
    assert pending_batch_records(q) == 15 + 0 + 3
    _commit(q, 1)
    assert pending_batch_records(q) == 0


def test_no_checkpoint_and_a_first_batch(tmp_path):
    assert pending_batch_records(tmp_path / "missing") == 0
    q = tmp_path / "q"
    _offsets(q, 0, {"in": {"0": 7}})
    assert pending_batch_records(q) == 7
