"""Whether a compiled topology can run in Spark's real-time mode (``streamtable.trigger=
'real_time'``).

Spark 4.3's real-time mode runs long tasks that process each record as it arrives (latency of
milliseconds instead of a micro-batch), for queries made of Spark SQL only: no Python worker
(UDFs, ``mapInArrow``, Python ``transformWithState``), Kafka in and out through Spark's own
source and sink, update output mode. streamtable supports it for stateless topologies whose
steps are column expressions (:mod:`streamtable.functions`) over serdes Spark reads itself;
everything else is refused when the application starts, naming what stands in the way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from streamtable.errors import TopologyError

if TYPE_CHECKING:
    from streamtable.compiler.frame import CompileContext
    from streamtable.compiler.plan import QueryPlan

__all__ = ["check_real_time"]

#: Logical plan nodes that run Python (none is in real-time mode's allowlist).
_PYTHON_NODES = (
    "MapInArrow",
    "MapInPandas",
    "ArrowEvalPython",
    "BatchEvalPython",
    "PythonUDF",
    "TransformWithState",
    "FlatMapGroupsInPandas",
)


def _python_node(plan: QueryPlan) -> str | None:
    analyzed = plan.df._jdf.queryExecution().analyzed().toString()
    return next((n for n in _PYTHON_NODES if n in analyzed), None)


def check_real_time(plans: Sequence[QueryPlan], ctx: CompileContext) -> None:
    """Raise unless every query of ``plans`` can run in Spark's real-time mode.

    Raises
    ------
    TopologyError
        Naming, per query, the stateful operator, the sink, or the steps and sources that
        need Python, and saying what to change.
    """
    problems = []
    for plan in plans:
        where = f"query {plan.name!r}"
        if plan.output_mode == "update":
            problems.append(
                f"{where} has a stateful operator (an aggregation, join, suppression or "
                "processor): real-time mode runs stateless topologies in this version"
            )
        elif plan.writes_internal is not None:
            problems.append(f"{where} writes the repartition topic {plan.writes_internal!r}")
        elif plan.sink != "kafka":
            what = "files (to_files)" if plan.sink == "files" else "no topic (foreach)"
            problems.append(f"{where} writes {what}; real-time mode writes Kafka topics only")
        elif ctx.python_stages.get(plan.name):
            problems.append(f"{where} runs Python for {', '.join(ctx.python_stages[plan.name])}")
        elif (node := _python_node(plan)) is not None:
            problems.append(f"{where} runs Python (Spark's {node})")
    if problems:
        raise TopologyError(
            "streamtable.trigger='real_time' (Spark's real-time mode) runs only topologies that "
            "compile to Spark SQL: stateless steps written as column expressions "
            "(streamtable.functions) over Serdes.string()/bytes() sources, written to Kafka. "
            + "; ".join(problems)
            + ". Write those steps as column expressions, or use "
            "streamtable.trigger='processing_time'."
        )
