"""Keeps ``docs/kafka-streams-mapping.md`` honest.

- every streamtable name cited in a table's *streamtable* column exists, with the parameters
  shown (``KStream.to(topic, key_serde=)``: ``to`` takes ``topic`` and ``key_serde``);
- every public method and property of streamtable's DSL, runtime and testing classes is cited
  somewhere in that column, so a new method cannot be left out of the table;
- every Kafka Streams method of the main interfaces has a row in its section;
- statuses are ``same``, ``differs`` or ``not supported``, and only unsupported rows cite
  nothing.

No JVM is started: importing ``KafkaStreams`` and the test driver loads PySpark's Python
modules only.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

DOC = Path(__file__).resolve().parents[2] / "docs" / "kafka-streams-mapping.md"
DOC_NAME = "docs/kafka-streams-mapping.md"
STATUSES = {"same", "differs", "not supported"}

#: Kafka Streams 4.x methods (one per overloaded name) that must each have a row in the
#: section of the same title.
KAFKA_METHODS: dict[str, set[str]] = {
    "StreamsBuilder": {
        "stream",
        "table",
        "globalTable",
        "addStateStore",
        "addGlobalStore",
        "build",
    },
    "KStream": {
        "filter",
        "filterNot",
        "map",
        "mapValues",
        "flatMap",
        "flatMapValues",
        "selectKey",
        "peek",
        "foreach",
        "print",
        "merge",
        "split",
        "repartition",
        "to",
        "toTable",
        "groupByKey",
        "groupBy",
        "join",
        "leftJoin",
        "outerJoin",
        "process",
        "processValues",
    },
    "BranchedKStream": {"branch", "defaultBranch", "noDefaultBranch"},
    "KTable": {
        "filter",
        "filterNot",
        "mapValues",
        "transformValues",
        "toStream",
        "suppress",
        "groupBy",
        "join",
        "leftJoin",
        "outerJoin",
        "queryableStoreName",
    },
    "GlobalKTable": {"queryableStoreName"},
    "KGroupedStream": {"count", "reduce", "aggregate", "windowedBy", "cogroup"},
    "KGroupedTable": {"count", "reduce", "aggregate"},
    "TimeWindowedKStream": {"count", "reduce", "aggregate", "emitStrategy"},
    "SessionWindowedKStream": {"count", "reduce", "aggregate", "emitStrategy"},
    "Topology": {
        "describe",
        "addSource",
        "addSink",
        "addProcessor",
        "addStateStore",
        "addReadOnlyStateStore",
        "addGlobalStore",
        "connectProcessorAndStateStores",
    },
    "KafkaStreams": {
        "start",
        "close",
        "cleanUp",
        "state",
        "metrics",
        "setUncaughtExceptionHandler",
        "setStateListener",
        "setGlobalStateRestoreListener",
        "setStandbyUpdateListener",
        "store",
        "query",
        "queryMetadataForKey",
        "streamsMetadataForStore",
        "metadataForAllStreamsClients",
        "metadataForLocalThreads",
        "allLocalStorePartitionLags",
        "addStreamThread",
        "removeStreamThread",
        "pause",
        "resume",
        "isPaused",
        "clientInstanceIds",
    },
    "TopologyTestDriver": {
        "createInputTopic",
        "createOutputTopic",
        "advanceWallClockTime",
        "getKeyValueStore",
        "getWindowStore",
        "getSessionStore",
        "getTimestampedKeyValueStore",
        "getTimestampedWindowStore",
        "getVersionedKeyValueStore",
        "getStateStore",
        "getAllStateStores",
        "producedTopicNames",
        "metrics",
        "close",
    },
    "TestInputTopic": {
        "pipeInput",
        "pipeValueList",
        "pipeKeyValueList",
        "pipeRecordList",
        "advanceTime",
    },
    "TestOutputTopic": {
        "readValue",
        "readKeyValue",
        "readRecord",
        "readValuesToList",
        "readKeyValuesToList",
        "readKeyValuesToMap",
        "readRecordsToList",
        "isEmpty",
        "getQueueSize",
    },
}


@dataclass(frozen=True)
class Row:
    section: str
    line: int
    cells: dict[str, str]  # header -> cell text


def _rows() -> list[Row]:
    """Every row of every table, with the section (``## title``) it is in."""
    rows: list[Row] = []
    section = ""
    header: list[str] | None = None
    lines = DOC.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines, 1):
        if line.startswith("## "):
            section = line[3:].strip()
            header = None
            continue
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
        elif all(set(c) <= set("-: ") for c in cells):
            continue  # the separator line
        else:
            assert len(cells) == len(header), (
                f"{DOC_NAME}:{number}: {len(cells)} cells for {len(header)} columns "
                "(a '|' inside a cell?)"
            )
            rows.append(Row(section, number, dict(zip(header, cells, strict=True))))
    return rows


def _classes() -> dict[str, type]:
    """The streamtable classes the table may cite, by name."""
    import streamtable
    from streamtable.runtime.kafka_streams import KafkaStreams
    from streamtable.testing import driver

    found: dict[str, type] = {
        name: getattr(streamtable, name)
        for name in streamtable.__all__
        if name != "KafkaStreams" and inspect.isclass(getattr(streamtable, name))
    }
    found["KafkaStreams"] = KafkaStreams
    for module in (driver, _optional("streamtable.testing.driver_stores")):
        if module is None:
            continue
        for name in getattr(module, "__all__", ()):
            obj = getattr(module, name, None)
            if inspect.isclass(obj):
                found[name] = obj
    return found


def _optional(module: str) -> object | None:
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


#: Classes whose every public method must be cited (the rest may be cited but need not be).
CHECKED = (
    "StreamsBuilder",
    "ReadOnlyKeyValueStore",
    "KStream",
    "BranchedKStream",
    "KTable",
    "GlobalKTable",
    "KGroupedStream",
    "TimeWindowedKStream",
    "KGroupedTable",
    "Topology",
    "TimeWindows",
    "Windows",
    "SlidingWindows",
    "SessionWindows",
    "JoinWindows",
    "Suppressed",
    "BufferConfig",
    "Serdes",
    "KafkaStreams",
)


def _testing_classes() -> tuple[str, ...]:
    """Driver classes present now: ``driver.__all__`` and the store views."""
    from streamtable.testing import driver

    names = [n for n in driver.__all__ if inspect.isclass(getattr(driver, n, None))]
    stores = _optional("streamtable.testing.driver_stores")
    if stores is not None:
        names += [
            n for n in getattr(stores, "__all__", ()) if inspect.isclass(getattr(stores, n, None))
        ]
    return tuple(names)


def _public_methods(cls: type) -> set[str]:
    """Public functions, class/static methods and properties defined by ``cls`` or its bases
    (not by ``object``, ``Generic`` or ``Enum``)."""
    out = set()
    for klass in cls.__mro__:
        if klass.__module__ in ("builtins", "typing", "enum"):
            continue
        for name, attr in vars(klass).items():
            if name.startswith("_"):
                continue
            if isinstance(attr, staticmethod | classmethod | property) or inspect.isfunction(attr):
                out.add(name)
    return out


_CITATION = re.compile(r"^([A-Z]\w*)(?:\.(\w+))?(?:\((.*)\))?$")


def _citations(cell: str) -> list[tuple[str, str | None, str | None]]:
    """``(class, member or None, argument text or None)`` for each code span of a cell that
    names a class (``KStream.to(topic, key_serde=)``, ``StreamsBuilder()``)."""
    out = []
    for span in re.findall(r"`([^`]+)`", cell):
        m = _CITATION.match(span.strip())
        if m:
            out.append((m.group(1), m.group(2), m.group(3)))
    return out


def _has_member(cls: type, name: str) -> bool:
    if hasattr(cls, name):
        return True
    return dataclasses.is_dataclass(cls) and name in {f.name for f in dataclasses.fields(cls)}


def _check_arguments(cls: type, member: str | None, args: str, where: str) -> list[str]:
    target = getattr(cls, member) if member else cls.__init__
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):  # pragma: no cover - a builtin without a signature
        return []
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return []
    shown = f"{cls.__name__}.{member}" if member else cls.__name__
    problems = []
    for token in re.findall(r"(\w+)\s*=?", args):
        if token not in params:
            problems.append(
                f"{where}: `{shown}` has no parameter {token!r} (its parameters: "
                f"{[p for p in params if p != 'self']}); fix the row in {DOC_NAME}."
            )
    return problems


def test_table_parses_and_statuses_are_known() -> None:
    rows = [r for r in _rows() if "status" in r.cells]
    assert len(rows) > 100, f"{DOC_NAME}: expected the full mapping, parsed {len(rows)} rows"
    problems = []
    for r in rows:
        status = r.cells["status"]
        cited = _citations(r.cells["streamtable"])
        if status not in STATUSES:
            problems.append(f"{DOC_NAME}:{r.line}: unknown status {status!r}")
        elif status == "not supported" and r.cells["streamtable"] != "—":
            problems.append(f"{DOC_NAME}:{r.line}: a 'not supported' row cites streamtable names")
        elif status != "not supported" and r.cells["streamtable"] != "—" and not cited:
            problems.append(f"{DOC_NAME}:{r.line}: the streamtable cell cites no class member")
    assert not problems, "\n".join(problems)


def test_cited_streamtable_names_exist() -> None:
    classes = _classes()
    problems = []
    for r in _rows():
        cell = r.cells.get("streamtable")
        if cell is None:
            continue
        where = f"{DOC_NAME}:{r.line} ({r.section})"
        for cls_name, member, args in _citations(cell):
            cls = classes.get(cls_name)
            if cls is None:
                problems.append(
                    f"{where}: `{cls_name}` is not a public streamtable class (known: "
                    f"{sorted(classes)})."
                )
                continue
            if member is not None and not _has_member(cls, member):
                problems.append(
                    f"{where}: `{cls_name}.{member}` does not exist in "
                    f"{cls.__module__}; fix the row or the code."
                )
                continue
            if args is not None:
                problems += _check_arguments(cls, member, args, where)
    assert not problems, "\n".join(problems)


def test_every_public_method_is_in_the_table() -> None:
    classes = _classes()
    cited = {
        (cls_name, member)
        for r in _rows()
        if "streamtable" in r.cells
        for cls_name, member, _ in _citations(r.cells["streamtable"])
        if member is not None
    }
    missing = []
    for cls_name in CHECKED + _testing_classes():
        cls = classes[cls_name]
        for method in sorted(_public_methods(cls)):
            if (cls_name, method) not in cited:
                missing.append(
                    f"`{cls_name}.{method}` ({cls.__module__}) is not in {DOC_NAME}: add a row "
                    f"citing it to the {cls_name} section (or to 'streamtable only')."
                )
    assert not missing, "\n".join(missing)


def test_every_kafka_streams_method_has_a_row() -> None:
    by_section: dict[str, set[str]] = {}
    for r in _rows():
        if "Kafka Streams" not in r.cells:
            continue
        names = set()
        for span in re.findall(r"`([^`]+)`", r.cells["Kafka Streams"]):
            names.update(re.findall(r"(?:^|[./ ])([a-z]\w*)", span))
        by_section.setdefault(r.section, set()).update(names)
    missing = [
        f"{section}.{method}: no row in the '## {section}' section of {DOC_NAME}"
        for section, methods in KAFKA_METHODS.items()
        for method in sorted(methods - by_section.get(section, set()))
    ]
    assert not missing, "\n".join(missing)
