r"""Pictures of a topology: a :class:`TopologyDescription` as Graphviz DOT, SVG or Mermaid.

The picture shows what ``describe()`` prints, laid out as a graph:

- each sub-topology is a cluster (Graphviz) or a ``subgraph`` (Mermaid) labelled
  ``Sub-topology: N`` (``Sub-topology: N for global store`` for a ``GlobalKTable``'s store);
- its sources, processors and sinks are boxes (sources and sinks with rounded corners), linked
  in the direction records flow;
- topics are drawn outside the sub-topologies, once per topic: an arrow leads from a topic to
  each source reading it and from each sink to the topic it writes, so a repartition topic
  connects the two sub-topologies it separates;
- state stores are cylinders inside their sub-topology, linked by dashed lines to the
  processors connected to them; a global store is filled darker and labelled
  ``(global store)``.

Node ids are made of the node's kind and its name with every character other than ASCII
letters, digits and ``_`` replaced by ``_`` (``node_KSTREAM_SOURCE_0000000000``,
``topic_flights``, ``store_counts``), numbered on a clash; names appear only in labels,
escaped for each format.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import graphviz

from streamtable.errors import EnvironmentSetupError
from streamtable.topology.describe import TopologyDescription

__all__ = ["FORMATS", "MISSING_DOT_MESSAGE", "to_dot", "to_graphviz", "to_mermaid", "to_svg"]

#: Raised (as :class:`~streamtable.errors.EnvironmentSetupError`) by :func:`to_svg` when
#: Graphviz is not installed.
MISSING_DOT_MESSAGE = (
    "Drawing a topology as SVG needs Graphviz's `dot` executable, which is not on PATH. "
    "Install Graphviz (Debian/Ubuntu: apt-get install graphviz; macOS: brew install graphviz), "
    "or choose a format that needs no Graphviz: DOT source or a Mermaid flowchart "
    "(streamtable describe --format dot|mermaid)."
)

_TOPIC_STYLE = {"shape": "cds", "style": "filled", "fillcolor": "#fff2cc"}
_STORE_STYLE = {"shape": "cylinder", "style": "filled", "fillcolor": "#dae8fc"}
_GLOBAL_STORE_STYLE = {"shape": "cylinder", "style": "filled,bold", "fillcolor": "#7ea6e0"}
_STORE_EDGE_STYLE = {"style": "dashed", "arrowhead": "none"}


# -- what is drawn, whatever the format -------------------------------------------------------


@dataclass
class _Cluster:
    id: str
    label: str
    for_global_store: bool
    nodes: list[tuple[str, str, str]] = field(default_factory=list)  # id, name, kind
    stores: list[tuple[str, str]] = field(default_factory=list)  # id, name


@dataclass
class _Picture:
    clusters: list[_Cluster] = field(default_factory=list)
    topics: list[tuple[str, str]] = field(default_factory=list)  # id, name
    flows: list[tuple[str, str]] = field(default_factory=list)  # from id, to id
    store_links: list[tuple[str, str]] = field(default_factory=list)  # processor id, store id


class _Ids:
    """Unique, format-safe ids: ``<kind>_<name with [^A-Za-z0-9_] as _>``, numbered on a clash."""

    def __init__(self) -> None:
        self._ids: dict[tuple[str, str], str] = {}
        self._taken: set[str] = set()

    def __call__(self, kind: str, name: str) -> str:
        key = (kind, name)
        if key not in self._ids:
            base = f"{kind}_{re.sub(r'[^A-Za-z0-9_]', '_', name)}"
            ident, n = base, 1
            while ident in self._taken:
                n += 1
                ident = f"{base}_{n}"
            self._taken.add(ident)
            self._ids[key] = ident
        return self._ids[key]


def _picture(description: TopologyDescription) -> _Picture:
    ids = _Ids()
    pic = _Picture()
    topics: set[str] = set()
    stores: set[str] = set()

    def topic(name: str) -> str:
        ident = ids("topic", name)
        if ident not in topics:
            topics.add(ident)
            pic.topics.append((ident, name))
        return ident

    for sub in description.subtopologies:
        label = f"Sub-topology: {sub.id}" + (" for global store" if sub.for_global_store else "")
        cluster = _Cluster(f"cluster_{sub.id}", label, sub.for_global_store)
        pic.clusters.append(cluster)
        for node in sub.nodes:
            ident = ids("node", node.name)
            cluster.nodes.append((ident, node.name, node.kind))
            if node.kind == "Source":
                pic.flows.extend((topic(t), ident) for t in node.topics)
            elif node.kind == "Sink":
                pic.flows.extend((ident, topic(t)) for t in node.topics)
            pic.flows.extend((ident, ids("node", s)) for s in node.successors)
            for store in node.stores:
                store_id = ids("store", store)
                if store_id not in stores:
                    stores.add(store_id)
                    cluster.stores.append((store_id, store))
                pic.store_links.append((ident, store_id))
    return pic


# -- Graphviz ---------------------------------------------------------------------------------


def to_graphviz(description: TopologyDescription) -> graphviz.Digraph:
    """The topology as a ``graphviz.Digraph`` (top to bottom), one cluster per sub-topology.

    Parameters
    ----------
    description : TopologyDescription
        What ``Topology.describe()`` returned.

    Returns
    -------
    graphviz.Digraph
        Sub-topologies are clusters ``cluster_<id>``; processors are boxes (sources and sinks
        rounded), topics ``cds`` shapes outside the clusters, state stores cylinders inside
        them, linked to their processors by dashed lines. In Jupyter the object shows itself
        as a picture (which needs Graphviz's ``dot``); ``.source`` is the DOT text.

    Examples
    --------
    >>> from streamtable import StreamsBuilder
    >>> b = StreamsBuilder()
    >>> b.stream("in").to("out")
    >>> graph = to_graphviz(b.build().describe())
    >>> graph.name
    'topology'
    """
    pic = _picture(description)
    graph = graphviz.Digraph(
        "topology",
        graph_attr={"rankdir": "TB", "fontname": "Helvetica"},
        node_attr={"fontname": "Helvetica", "fontsize": "10"},
        edge_attr={"fontname": "Helvetica"},
    )
    for ident, name in pic.topics:
        graph.node(ident, graphviz.escape(name), **_TOPIC_STYLE)
    for cluster in pic.clusters:
        with graph.subgraph(name=cluster.id) as sub:
            sub.attr(label=cluster.label, style="rounded", color="#666666")
            for ident, name, kind in cluster.nodes:
                style = "rounded" if kind in ("Source", "Sink") else "solid"
                sub.node(ident, graphviz.escape(name), shape="box", style=style)
            for ident, name in cluster.stores:
                if cluster.for_global_store:
                    label = graphviz.nohtml(graphviz.escape(name) + r"\n(global store)")
                    sub.node(ident, label, **_GLOBAL_STORE_STYLE)
                else:
                    sub.node(ident, graphviz.escape(name), **_STORE_STYLE)
    for tail, head in pic.flows:
        graph.edge(tail, head)
    for processor, store in pic.store_links:
        graph.edge(processor, store, **_STORE_EDGE_STYLE)
    return graph


def to_dot(description: TopologyDescription) -> str:
    """The topology as Graphviz DOT source (:func:`to_graphviz`'s ``.source``).

    Parameters
    ----------
    description : TopologyDescription
        What ``Topology.describe()`` returned.

    Returns
    -------
    str
        A ``digraph topology``; ``dot -Tsvg`` (or ``-Tpng``) draws it.

    Examples
    --------
    >>> from streamtable import StreamsBuilder
    >>> b = StreamsBuilder()
    >>> b.stream("in").filter(lambda k, v: v, name="non-empty").to("out")
    >>> print(to_dot(b.build().describe()))
    digraph topology {
        graph [fontname=Helvetica rankdir=TB]
        node [fontname=Helvetica fontsize=10]
        edge [fontname=Helvetica]
        topic_in [label=in fillcolor="#fff2cc" shape=cds style=filled]
        topic_out [label=out fillcolor="#fff2cc" shape=cds style=filled]
        subgraph cluster_0 {
            color="#666666" label="Sub-topology: 0" style=rounded
            node_KSTREAM_SOURCE_0000000000 [label="KSTREAM-SOURCE-0000000000" shape=box style=rounded]
            node_non_empty [label="non-empty" shape=box style=solid]
            node_KSTREAM_SINK_0000000002 [label="KSTREAM-SINK-0000000002" shape=box style=rounded]
        }
        topic_in -> node_KSTREAM_SOURCE_0000000000
        node_KSTREAM_SOURCE_0000000000 -> node_non_empty
        node_non_empty -> node_KSTREAM_SINK_0000000002
        node_KSTREAM_SINK_0000000002 -> topic_out
    }
    """  # noqa: E501
    return to_graphviz(description).source


def to_svg(description: TopologyDescription) -> str:
    """The topology drawn as SVG by Graphviz's ``dot`` (the picture of :func:`to_dot`).

    Parameters
    ----------
    description : TopologyDescription
        What ``Topology.describe()`` returned.

    Returns
    -------
    str
        An SVG document.

    Raises
    ------
    EnvironmentSetupError
        If Graphviz's ``dot`` executable is not on ``PATH`` (:data:`MISSING_DOT_MESSAGE`
        says how to install it; :func:`to_dot` and :func:`to_mermaid` need no Graphviz).
    """
    try:
        return to_graphviz(description).pipe(format="svg", encoding="utf-8")
    except graphviz.ExecutableNotFound as exc:
        raise EnvironmentSetupError(MISSING_DOT_MESSAGE) from exc


# -- Mermaid ----------------------------------------------------------------------------------

# characters that Mermaid would read as markup inside a quoted label, as its entity codes
_MERMAID_ENTITIES = {
    "#": "#35;",
    '"': "#quot;",
    "&": "#amp;",
    "<": "#lt;",
    ">": "#gt;",
    "`": "#96;",
}
_MERMAID_SPECIAL = re.compile("[" + re.escape("".join(_MERMAID_ENTITIES)) + "]")


def _mermaid_label(name: str) -> str:
    return _MERMAID_SPECIAL.sub(lambda m: _MERMAID_ENTITIES[m.group()], name)


def to_mermaid(description: TopologyDescription) -> str:
    """The topology as a Mermaid flowchart (``flowchart TB``), one subgraph per sub-topology.

    Parameters
    ----------
    description : TopologyDescription
        What ``Topology.describe()`` returned.

    Returns
    -------
    str
        Mermaid text: topics as flags (``>"name"]``) outside the subgraphs, sources and sinks
        as rounded boxes, processors as boxes, state stores as cylinders linked to their
        processors by dotted lines (``-.-``). Names are quoted, with ``"``, ``#``, ``&``,
        ``<``, ``>`` and backticks written as Mermaid entity codes.

    Examples
    --------
    >>> from streamtable import StreamsBuilder
    >>> b = StreamsBuilder()
    >>> b.stream("words").group_by_key().count(name="counts").to_stream().to("word-counts")
    >>> print(to_mermaid(b.build().describe()))
    flowchart TB
        topic_words>"words"]
        topic_word_counts>"word-counts"]
        subgraph cluster_0["Sub-topology: 0"]
            node_KSTREAM_SOURCE_0000000000("KSTREAM-SOURCE-0000000000")
            node_KSTREAM_AGGREGATE_0000000001["KSTREAM-AGGREGATE-0000000001"]
            node_KTABLE_TOSTREAM_0000000002["KTABLE-TOSTREAM-0000000002"]
            node_KSTREAM_SINK_0000000003("KSTREAM-SINK-0000000003")
            store_counts[("counts")]
        end
        topic_words --> node_KSTREAM_SOURCE_0000000000
        node_KSTREAM_SOURCE_0000000000 --> node_KSTREAM_AGGREGATE_0000000001
        node_KSTREAM_AGGREGATE_0000000001 --> node_KTABLE_TOSTREAM_0000000002
        node_KTABLE_TOSTREAM_0000000002 --> node_KSTREAM_SINK_0000000003
        node_KSTREAM_SINK_0000000003 --> topic_word_counts
        node_KSTREAM_AGGREGATE_0000000001 -.- store_counts
        classDef topic fill:#fff2cc,stroke:#d6b656
        classDef store fill:#dae8fc,stroke:#6c8ebf
        class topic_words,topic_word_counts topic
        class store_counts store
    """
    pic = _picture(description)
    lines = ["flowchart TB"]
    lines += [f'    {ident}>"{_mermaid_label(name)}"]' for ident, name in pic.topics]
    global_stores: list[str] = []
    for cluster in pic.clusters:
        lines.append(f'    subgraph {cluster.id}["{cluster.label}"]')
        for ident, name, kind in cluster.nodes:
            left, right = ("(", ")") if kind in ("Source", "Sink") else ("[", "]")
            lines.append(f'        {ident}{left}"{_mermaid_label(name)}"{right}')
        for ident, name in cluster.stores:
            label = _mermaid_label(name)
            if cluster.for_global_store:
                label += "<br/>(global store)"
                global_stores.append(ident)
            lines.append(f'        {ident}[("{label}")]')
        lines.append("    end")
    lines += [f"    {tail} --> {head}" for tail, head in pic.flows]
    lines += [f"    {processor} -.- {store}" for processor, store in pic.store_links]
    local_stores = [i for c in pic.clusters for i, _ in c.stores if i not in global_stores]
    lines.append("    classDef topic fill:#fff2cc,stroke:#d6b656")
    if local_stores:
        lines.append("    classDef store fill:#dae8fc,stroke:#6c8ebf")
    if global_stores:
        lines.append("    classDef globalStore fill:#7ea6e0,stroke:#6c8ebf,stroke-width:2px")
    if pic.topics:
        lines.append(f"    class {','.join(i for i, _ in pic.topics)} topic")
    if local_stores:
        lines.append(f"    class {','.join(local_stores)} store")
    if global_stores:
        lines.append(f"    class {','.join(global_stores)} globalStore")
    return "\n".join(lines)


#: The formats of ``streamtable describe --format``: each a function of a
#: :class:`TopologyDescription` returning text (``text`` is Kafka Streams' ``describe()`` text).
FORMATS: dict[str, Callable[[TopologyDescription], str]] = {
    "text": str,
    "dot": to_dot,
    "svg": to_svg,
    "mermaid": to_mermaid,
}
