"""Lowering of ``SuppressNode`` with ``until_time_limit`` (``until_window_closes`` is fused into
the windowed aggregation, see :mod:`.windowed`).
"""

from __future__ import annotations

from streamtable.compiler.codecs import PickleCodec
from streamtable.compiler.frame import CompileContext, Frame
from streamtable.compiler.lower.paged import frame_columns_only, run_paged
from streamtable.compiler.lower.record_ops import convert
from streamtable.compiler.paged.suppress_kernels import TimeLimitSuppressKernel
from streamtable.topology.nodes import SuppressNode


def lower_suppress(
    ctx: CompileContext, node: SuppressNode, parent: Frame, with_old: bool = False
) -> Frame:
    """Hold back the updates of the table ``parent`` (see :mod:`..paged.suppress_kernels`).

    Output: the table's updates, at most one per key per micro-batch, each emitted once stream
    time has passed the first held update's timestamp + the time limit. With ``with_old``
    (``parent`` carries a column ``old``, in its value codec), the output keeps a column
    ``old``: the old value of the key's last held update, for a table filter after it.
    """
    assert node.suppress is not None
    if parent.value_codec.native_long:  # a native bigint column; the buffer holds bytes
        assert not with_old, f"{node.name}: old values come from a Python fold"
        parent = convert(ctx, parent, None, PickleCodec())
    kernel = TimeLimitSuppressKernel(node.name, node.suppress, with_old=with_old)
    out = run_paged(ctx, [parent], kernel, single_stream_time=True)
    df = out if with_old else frame_columns_only(out)
    return parent.with_(df=df, stateful=True, pending_source=None)
