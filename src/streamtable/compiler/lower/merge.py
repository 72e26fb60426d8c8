"""Lowering of ``MergeNode``: a union of the inputs, re-encoded to common codecs first."""

from __future__ import annotations

from streamtable.compiler.codecs import PickleCodec
from streamtable.compiler.flat_row import ddl_columns
from streamtable.compiler.frame import CompileContext, Frame
from streamtable.compiler.lower.record_ops import convert
from streamtable.compiler.record_stage import FRAME_DDL

_COLUMNS = ddl_columns(FRAME_DDL)


def lower_merge(ctx: CompileContext, inputs: list[Frame]) -> Frame:
    """Union ``inputs``; each keeps its order, there is none across them (Kafka's ``merge``)."""
    first = inputs[0]
    same_key = all(f.key_codec == first.key_codec for f in inputs)
    same_value = all(f.value_codec == first.value_codec for f in inputs)
    key = None if same_key else PickleCodec()
    value = None if same_value and not first.value_codec.native_long else PickleCodec()
    frames = [convert(ctx, f, key, value) for f in inputs]
    df = frames[0].df.select(*_COLUMNS)
    for f in frames[1:]:
        df = df.unionByName(f.df.select(*_COLUMNS))
    return Frame(
        df,
        frames[0].key_codec,
        frames[0].value_codec,
        stateful=any(f.stateful for f in frames),
    )
