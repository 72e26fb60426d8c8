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
    "FlatMapGroupsInArrow",
    "FlatMapCoGroupsIn",
    "PythonUDTF",
    "PythonUDF",
)


def _python_node(plan: QueryPlan) -> str | None:
    # the JSON form names every node's and expression's class (a Python UDF inside an
    # expression prints as its function's name in the text form)
    analyzed = plan.df._jdf.queryExecution().analyzed()
    try:
        text = analyzed.toJSON()
    except Exception:  # a node without a JSON form: the text form still names Python nodes
        text = analyzed.toString()
    return next((n for n in _PYTHON_NODES if n in text), None)


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
    cores = ctx.spark.sparkContext.defaultParallelism
    needed = sum(ctx.source_partitions.get(plan.name, 0) for plan in plans)
    if not problems and needed > cores:
        problems.append(
            f"its {len(plans)} quer{'y' if len(plans) == 1 else 'ies'} read {needed} Kafka "
            f"partitions in all, and real-time mode runs one long task per partition, but Spark "
            f"has {cores} cores (spark.master {ctx.spark.sparkContext.master!r}): give Spark "
            "more cores (e.g. spark.master=local[N]) or the topics fewer partitions"
        )
    if problems:
        raise TopologyError(
            "streamtable.trigger='real_time' (Spark's real-time mode) runs only topologies that "
            "compile to Spark SQL: stateless steps written as column expressions "
            "(streamtable.functions) over Serdes.string()/bytes() sources, written to Kafka. "
            + "; ".join(problems)
            + ". Write those steps as column expressions, or use "
            "streamtable.trigger='processing_time'."
        )
