"""Pictures of a topology (``streamtable.topology.render``): DOT, Mermaid, SVG, and
``streamtable describe --format``.

The DOT and Mermaid texts are read back into (clusters, topics, edges, store links) and
compared with what ``describe()`` says of the same topology.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from xml.etree import ElementTree

import pytest
from click.testing import CliRunner

from streamtable import JoinWindows, StreamsBuilder
from streamtable import cli as cli_module
from streamtable.errors import EnvironmentSetupError
from streamtable.topology.describe import (
    NodeDescription,
    SubtopologyDescription,
    TopologyDescription,
)
from streamtable.topology.render import (
    FORMATS,
    MISSING_DOT_MESSAGE,
    to_dot,
    to_graphviz,
    to_mermaid,
    to_svg,
)

pytestmark = pytest.mark.unit


# -- the topologies ------------------------------------------------------------------------------


def simple_stream():
    b = StreamsBuilder()
    b.stream("clicks").filter(lambda k, v: v, name="non-empty").map_values(
        str.upper, name="upper"
    ).to("clicks-upper")
    return b.build().describe()


def repartitioning_count():
    b = StreamsBuilder()
    b.stream("words").group_by(lambda k, v: v, name="by-word").count(name="counts").to_stream().to(
        "word-counts"
    )
    return b.build().describe()


def stream_stream_join():
    b = StreamsBuilder()
    window = JoinWindows.of_time_difference_with_no_grace(timedelta(minutes=5))
    b.stream("left").left_join(b.stream("right"), lambda a, c: (a, c), window).to("joined")
    return b.build().describe()


def global_table_join():
    b = StreamsBuilder()
    airlines = b.global_table("airlines", name="airlines")
    b.stream("flights").join(airlines, lambda k, v: v, lambda v, a: (v, a), name="with-airline").to(
        "enriched"
    )
    return b.build().describe()


# -- reading the outputs back ---------------------------------------------------------------------


@dataclass
class Drawing:
    labels: dict[str, str] = field(default_factory=dict)  # id -> label
    shapes: dict[str, str] = field(default_factory=dict)  # id -> shape
    clusters: dict[str, tuple[str, set[str]]] = field(default_factory=dict)  # id -> label, ids
    flows: list[tuple[str, str]] = field(default_factory=list)
    store_links: list[tuple[str, str]] = field(default_factory=list)

    def ids(self, *labels: str) -> list[str]:
        by_label = {v: k for k, v in self.labels.items()}
        return [by_label[label] for label in labels]

    def named_flows(self) -> set[tuple[str, str]]:
        return {(self.labels[a], self.labels[b]) for a, b in self.flows}

    def named_store_links(self) -> set[tuple[str, str]]:
        return {(self.labels[a], self.labels[b]) for a, b in self.store_links}

    def cluster_members(self) -> dict[str, set[str]]:
        return {label: {self.labels[i] for i in ids} for label, ids in self.clusters.values()}

    def outside_clusters(self) -> set[str]:
        inside = set().union(*(ids for _, ids in self.clusters.values()))
        return {label for i, label in self.labels.items() if i not in inside}


_DOT_ATTR = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|[^\s\]]+)')


_DOT_ESCAPES = re.compile(r"\\(.)")


def _dot_attrs(text: str) -> dict[str, str]:
    """Attributes of a DOT statement; quoted values unescaped (``\\n`` a line break)."""
    return {
        k: _DOT_ESCAPES.sub(lambda m: "\n" if m.group(1) == "n" else m.group(1), v[1:-1])
        if v.startswith('"')
        else v
        for k, v in _DOT_ATTR.findall(text)
    }


def read_dot(dot: str) -> Drawing:
    d = Drawing()
    cluster = None
    for line in dot.splitlines():
        line = line.strip()
        if m := re.fullmatch(r"subgraph (cluster_\w+) \{", line):
            cluster = m.group(1)
            d.clusters[cluster] = ("", set())
        elif line == "}":
            cluster = None
        elif m := re.fullmatch(r"(\w+) -> (\w+)(?: \[(.*)\])?", line):
            attrs = _dot_attrs(m.group(3) or "")
            if attrs.get("style") == "dashed":
                assert attrs["arrowhead"] == "none"
                d.store_links.append((m.group(1), m.group(2)))
            else:
                d.flows.append((m.group(1), m.group(2)))
        elif m := re.fullmatch(r"(\w+) \[(.*)\]", line):
            if m.group(1) in ("graph", "node", "edge"):
                continue
            attrs = _dot_attrs(m.group(2))
            d.labels[m.group(1)] = attrs["label"]
            d.shapes[m.group(1)] = attrs["shape"]
            if cluster:
                d.clusters[cluster][1].add(m.group(1))
        elif cluster and line.startswith("color="):
            d.clusters[cluster] = (_dot_attrs(line)["label"], d.clusters[cluster][1])
    return d


_MERMAID_SHAPES = {'>"': "topic", '("': "rounded", '["': "box", '[("': "cylinder"}


def read_mermaid(text: str) -> Drawing:
    lines = text.splitlines()
    assert lines[0] == "flowchart TB"
    d = Drawing()
    cluster = None
    for line in lines[1:]:
        line = line.strip()
        if m := re.fullmatch(r'subgraph (\w+)\["(.*)"\]', line):
            cluster = m.group(1)
            d.clusters[cluster] = (m.group(2), set())
        elif line == "end":
            cluster = None
        elif m := re.fullmatch(r"(\w+) --> (\w+)", line):
            d.flows.append((m.group(1), m.group(2)))
        elif m := re.fullmatch(r"(\w+) -\.- (\w+)", line):
            d.store_links.append((m.group(1), m.group(2)))
        elif m := re.fullmatch(r'(\w+)(>"|\("|\["|\[\(")(.*)"(\]|\)|\)\])', line):
            d.labels[m.group(1)] = m.group(3).replace("<br/>", "\n")
            d.shapes[m.group(1)] = _MERMAID_SHAPES[m.group(2)]
            if cluster:
                d.clusters[cluster][1].add(m.group(1))
        else:
            assert line.startswith(("classDef ", "class ")), line
    return d


def expected(description: TopologyDescription):
    """(cluster label -> node names), flows between names, (processor, store) pairs."""
    clusters, flows, links = {}, set(), set()
    for sub in description.subtopologies:
        label = f"Sub-topology: {sub.id}" + (" for global store" if sub.for_global_store else "")
        clusters[label] = set(sub.node_names)
        for node in sub.nodes:
            flows |= {(node.name, s) for s in node.successors}
            if node.kind == "Source":
                flows |= {(t, node.name) for t in node.topics}
            if node.kind == "Sink":
                flows |= {(node.name, t) for t in node.topics}
            links |= {(node.name, s) for s in node.stores}
    return clusters, flows, links


READERS = {"dot": (to_dot, read_dot), "mermaid": (to_mermaid, read_mermaid)}


@pytest.fixture(params=["dot", "mermaid"])
def draw(request):
    render, read = READERS[request.param]
    return lambda description: read(render(description))


def _without_stores(members: dict[str, set[str]], stores: set[str]) -> dict[str, set[str]]:
    return {k: v - stores for k, v in members.items()}


# -- structure, in both formats ------------------------------------------------------------------


def test_simple_stream_is_one_cluster_between_its_two_topics(draw):
    d = draw(simple_stream())
    assert d.cluster_members() == {
        "Sub-topology: 0": {
            "KSTREAM-SOURCE-0000000000",
            "non-empty",
            "upper",
            "KSTREAM-SINK-0000000003",
        }
    }
    assert d.outside_clusters() == {"clicks", "clicks-upper"}
    assert d.named_flows() == {
        ("clicks", "KSTREAM-SOURCE-0000000000"),
        ("KSTREAM-SOURCE-0000000000", "non-empty"),
        ("non-empty", "upper"),
        ("upper", "KSTREAM-SINK-0000000003"),
        ("KSTREAM-SINK-0000000003", "clicks-upper"),
    }
    assert d.store_links == []


def test_repartition_topic_links_the_two_sub_topologies_and_the_store_sits_with_its_aggregate(
    draw,
):
    description = repartitioning_count()
    clusters, flows, links = expected(description)
    d = draw(description)
    assert d.cluster_members() == {
        "Sub-topology: 0": clusters["Sub-topology: 0"],
        "Sub-topology: 1": clusters["Sub-topology: 1"] | {"counts"},
    }
    assert "counts" not in clusters["Sub-topology: 0"]
    assert d.outside_clusters() == {"words", "by-word-repartition", "word-counts"}
    assert d.named_flows() == flows
    assert ("by-word-repartition-sink", "by-word-repartition") in flows
    assert ("by-word-repartition", "by-word-repartition-source") in flows
    assert d.named_store_links() == links == {("KSTREAM-AGGREGATE-0000000002", "counts")}


def test_stream_stream_join_links_each_store_to_every_processor_using_it(draw):
    description = stream_stream_join()
    clusters, flows, links = expected(description)
    d = draw(description)
    stores = {
        "KSTREAM-JOINTHIS-0000000004-store",
        "KSTREAM-OUTEROTHER-0000000005-store",
        "KSTREAM-OUTERSHARED-0000000004-store",
    }
    assert _without_stores(d.cluster_members(), stores) == clusters
    assert d.cluster_members()["Sub-topology: 0"] >= stores
    assert d.named_flows() == flows
    assert d.named_store_links() == links
    shared = {p for p, s in links if s == "KSTREAM-OUTERSHARED-0000000004-store"}
    assert shared == {"KSTREAM-JOINTHIS-0000000004", "KSTREAM-OUTEROTHER-0000000005"}
    (shape,) = {d.shapes[i] for i in d.ids(*stores)}
    assert shape == "cylinder"


def test_global_table_is_a_global_store_cluster_with_a_marked_store(draw):
    description = global_table_join()
    clusters, flows, links = expected(description)
    d = draw(description)
    assert list(clusters) == [
        "Sub-topology: 0 for global store",
        "Sub-topology: 1",
    ]
    (store_id,) = d.ids("airlines\n(global store)")
    members = d.cluster_members()
    assert members["Sub-topology: 0 for global store"] == (
        clusters["Sub-topology: 0 for global store"] | {"airlines\n(global store)"}
    )
    assert members["Sub-topology: 1"] == clusters["Sub-topology: 1"]
    # the topic and the store share the name "airlines": two nodes
    (topic_id,) = d.ids("airlines")
    assert topic_id != store_id and d.shapes[store_id] == "cylinder"
    assert d.named_store_links() == {("KTABLE-SOURCE-0000000001", "airlines\n(global store)")}
    assert {f for f in d.named_flows() if f[0] == "airlines"} == {
        ("airlines", "KSTREAM-SOURCE-0000000000")
    }


def test_shapes_tell_topics_sources_and_sinks_processors_and_stores_apart():
    description = repartitioning_count()
    dot, mermaid = read_dot(to_dot(description)), read_mermaid(to_mermaid(description))
    kinds = {
        "words": ("cds", "topic"),
        "KSTREAM-SOURCE-0000000000": ("box", "rounded"),
        "by-word": ("box", "box"),
        "by-word-repartition-sink": ("box", "rounded"),
        "counts": ("cylinder", "cylinder"),
    }
    for label, (dot_shape, mermaid_shape) in kinds.items():
        (dot_id,) = dot.ids(label)
        (mermaid_id,) = mermaid.ids(label)
        assert (dot.shapes[dot_id], mermaid.shapes[mermaid_id]) == (dot_shape, mermaid_shape)
    source, processor = dot.ids("KSTREAM-SOURCE-0000000000", "by-word")
    dot_text = to_dot(description)
    assert re.search(rf"\b{source} \[.*style=rounded", dot_text)
    assert re.search(rf"\b{processor} \[.*style=solid", dot_text)


def test_global_store_is_filled_darker_than_a_local_store():
    dot = to_dot(global_table_join())
    assert re.search(r'store_airlines \[label="airlines\\n\(global store\)".*bold', dot)
    mermaid = to_mermaid(global_table_join())
    assert "    class store_airlines globalStore" in mermaid
    assert "classDef globalStore fill:#7ea6e0" in mermaid
    assert "classDef store " not in mermaid  # no local store in this topology


# -- ids and labels of awkward names --------------------------------------------------------------


def _hand_built(*nodes: NodeDescription) -> TopologyDescription:
    sub = SubtopologyDescription(0, tuple(n.name for n in nodes), "", nodes=nodes)
    return TopologyDescription((sub,))


AWKWARD = _hand_built(
    NodeDescription("src", "Source", topics=("a-b",), successors=('say "hi" <b>#1</b>',)),
    NodeDescription(
        'say "hi" <b>#1</b>',
        "Processor",
        stores=("a.b", "back\\slash"),
        predecessors=("src",),
        successors=("a_b",),
    ),
    NodeDescription("a_b", "Sink", topics=("a_b",), predecessors=('say "hi" <b>#1</b>',)),
)


def test_ids_are_word_characters_unique_per_kind_and_name():
    d = read_dot(to_dot(AWKWARD))
    assert all(re.fullmatch(r"\w+", i) for i in d.labels)
    # topics "a-b" and "a_b" sanitize alike: numbered apart; the sink "a_b" is a node, the
    # store "a.b" a store
    assert d.labels["topic_a_b"] == "a-b" and d.labels["topic_a_b_2"] == "a_b"
    assert d.labels["node_a_b"] == "a_b" and d.labels["store_a_b"] == "a.b"
    assert d.labels["node_say__hi___b__1__b_"] == 'say "hi" <b>#1</b>'
    assert d.labels["store_back_slash"] == "back\\slash"
    assert read_mermaid(to_mermaid(AWKWARD)).flows == d.flows


def test_mermaid_writes_markup_characters_as_entity_codes():
    mermaid = to_mermaid(AWKWARD)
    assert (
        '        node_say__hi___b__1__b_["say #quot;hi#quot; #lt;b#gt;#35;1#lt;/b#gt;"]'
        in mermaid.splitlines()
    )
    assert '        store_back_slash[("back\\slash")]' in mermaid.splitlines()


def test_dot_labels_are_quoted_and_backslash_escaped_for_graphviz():
    source = to_graphviz(AWKWARD).source
    assert 'node_say__hi___b__1__b_ [label="say \\"hi\\" <b>#1</b>" shape=box' in source
    assert 'store_back_slash [label="back\\\\slash"' in source


# -- SVG -----------------------------------------------------------------------------------------


def _need_dot() -> None:
    if shutil.which("dot"):
        return
    message = "Graphviz's dot is not installed (apt-get install graphviz)"
    if os.environ.get("CI"):
        pytest.fail(f"{message}; CI installs it through scripts/ensure-jvm-tools.sh")
    pytest.skip(message)


def svg_parts(svg: str) -> tuple[list[str], list[str], int]:
    """Cluster titles, node texts (the lines of each node's label) and the number of edges."""
    assert svg.startswith("<?xml")
    root = ElementTree.fromstring(svg)
    ns = {"svg": "http://www.w3.org/2000/svg"}

    def texts(group):
        return "\n".join(t.text or "" for t in group.iterfind("svg:text", ns))

    groups = list(root.iter("{http://www.w3.org/2000/svg}g"))
    clusters = [texts(g) for g in groups if g.get("class") == "cluster"]
    nodes = [texts(g) for g in groups if g.get("class") == "node"]
    edges = sum(1 for g in groups if g.get("class") == "edge")
    return clusters, nodes, edges


def test_svg_draws_every_cluster_node_and_edge():
    _need_dot()
    description = global_table_join()
    clusters, nodes, edges = svg_parts(to_svg(description))
    assert clusters == ["Sub-topology: 0 for global store", "Sub-topology: 1"]
    names = {n for sub in description.subtopologies for n in sub.node_names}
    assert sorted(nodes) == sorted(
        [*names, "airlines", "flights", "enriched", "airlines\n(global store)"]
    )
    _, flows, links = expected(description)
    assert edges == len(flows) + len(links) == 7


def test_svg_draws_awkward_labels_as_given():
    _need_dot()
    _, nodes, _ = svg_parts(to_svg(AWKWARD))
    assert sorted(nodes) == sorted(
        ["src", 'say "hi" <b>#1</b>', "a_b", "a-b", "a_b", "a.b", "back\\slash"]
    )


def test_svg_without_dot_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no dot
    with pytest.raises(EnvironmentSetupError, match=r"needs Graphviz's `dot` executable") as err:
        to_svg(simple_stream())
    assert str(err.value) == MISSING_DOT_MESSAGE
    assert "apt-get install graphviz" in MISSING_DOT_MESSAGE
    assert "--format dot|mermaid" in MISSING_DOT_MESSAGE


# -- streamtable describe --format ---------------------------------------------------------------

APP = """\
from streamtable import StreamsBuilder

def topology():
    b = StreamsBuilder()
    b.stream("words").group_by(lambda k, v: v, name="by-word").count(
        name="counts"
    ).to_stream().to("word-counts")
    return b.build()
"""


@pytest.fixture
def app(tmp_path):
    path = tmp_path / "wordapp.py"
    path.write_text(APP)
    return f"{path}:topology"


def describe(*args, env=None):
    return CliRunner().invoke(cli_module.cli, ["describe", *args], env=env)


def test_cli_text_is_unchanged_by_default(app):
    result = describe(app)
    assert result.exit_code == 0, result.output
    assert result.output == str(repartitioning_count())
    assert describe(app, "--format", "text").output == result.output


@pytest.mark.parametrize("fmt", ["dot", "mermaid"])
def test_cli_prints_dot_and_mermaid(app, fmt):
    result = describe(app, "--format", fmt)
    assert result.exit_code == 0, result.output
    assert result.output == FORMATS[fmt](repartitioning_count()).rstrip("\n") + "\n"
    d = READERS[fmt][1](result.output)
    assert set(d.cluster_members()) == {"Sub-topology: 0", "Sub-topology: 1"}


def test_cli_format_from_the_environment_and_output_to_a_file(app, tmp_path):
    out = tmp_path / "topology.mmd"
    result = describe(app, "-o", str(out), env={"STREAMTABLE_DESCRIBE_FORMAT": "mermaid"})
    assert result.exit_code == 0, result.output
    assert result.output == ""
    assert out.read_text() == to_mermaid(repartitioning_count()) + "\n"


def test_cli_output_into_a_missing_folder_fails_with_one_line(app, tmp_path):
    out = tmp_path / "no-such-folder" / "topology.dot"
    result = describe(app, "--format", "dot", "--output", str(out))
    assert result.exit_code == 1
    assert result.output == f"Error: Cannot write {out}: No such file or directory\n"


def test_cli_svg_to_a_file(app, tmp_path):
    _need_dot()
    out = tmp_path / "topology.svg"
    result = describe(app, "--format", "svg", "--output", str(out))
    assert result.exit_code == 0, result.output
    clusters, _, _ = svg_parts(out.read_text())
    assert clusters == ["Sub-topology: 0", "Sub-topology: 1"]


def test_cli_svg_without_dot_fails_with_the_fix(app, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    result = describe(app, "--format", "svg")
    assert result.exit_code == 1
    assert result.output == f"Error: {MISSING_DOT_MESSAGE}\n"


def test_cli_rejects_an_unknown_format(app):
    result = describe(app, "--format", "png")
    assert result.exit_code == 2
    assert "'png' is not one of 'text', 'dot', 'svg', 'mermaid'" in result.output


# -- the documentation's picture -----------------------------------------------------------------

CLI_DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def test_the_cli_page_shows_the_flights_demo_as_describe_draws_it_today():
    from streamtable.demo import flights

    blocks = re.findall(r"```mermaid\n(.*?)```", CLI_DOC.read_text(), flags=re.S)
    assert blocks == [to_mermaid(flights.build_topology().describe()) + "\n"], (
        "docs/cli.md: paste the output of "
        "`streamtable describe streamtable.demo.flights:build_topology --format mermaid`"
    )
