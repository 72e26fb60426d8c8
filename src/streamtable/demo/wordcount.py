r"""WordCount, Kafka Streams' canonical example (``WordCountDemo``), on streamtable.

``streams-plaintext-input`` (String lines) → lower-case and split on non-word characters with
Java's ``String.split("\\W+")`` semantics → group by word → count →
``streams-wordcount-output`` (String key, Long value).
"""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from streamtable import KafkaStreams, Serdes, StreamsBuilder, Topology
from streamtable.demo.text import java_split_words

if TYPE_CHECKING:
    from streamtable.columns import ColumnExpression

INPUT_TOPIC = "streams-plaintext-input"
OUTPUT_TOPIC = "streams-wordcount-output"


def build_topology(
    input_topic: str = INPUT_TOPIC, output_topic: str = OUTPUT_TOPIC, *, columns: bool = False
) -> Topology:
    """The WordCount topology of Kafka's ``WordCountDemo``.

    With ``columns=True`` the tokenizer and the grouping are column expressions
    (:func:`words_column`, ``F.col("value")``): the same topology and output, run as Spark SQL
    (a null line then gives no words, where the Python tokenizer fails on it as Java does).
    """
    builder = StreamsBuilder()
    lines = builder.stream(input_topic, key_serde=Serdes.string(), value_serde=Serdes.string())
    if columns:
        from streamtable import functions as F

        words = lines.flat_map_values(words_column()).group_by(
            F.col("value"), key_serde=Serdes.string()
        )
    else:
        words = lines.flat_map_values(java_split_words).group_by(
            lambda _key, word: word, key_serde=Serdes.string()
        )
    counts = words.count(name="counts-store")
    counts.to_stream().to(output_topic, key_serde=Serdes.string(), value_serde=Serdes.long())
    return builder.build()


def words_column() -> ColumnExpression:
    r"""``value.toLowerCase().split("\\W+")`` as a column expression: Java's rules exactly, as
    :func:`~streamtable.demo.text.java_split_words` keeps them (Spark's ``split`` keeps
    trailing empty strings, Java's drops them: trailing separators are removed first, and a
    line of only separators gives no words).

    Examples
    --------
    >>> words_column()  # doctest: +ELLIPSIS
    when(((lower(col('value')) != '') & (regexp_replace(...) == '')), array()...
    """
    from streamtable import functions as F

    return java_split_column(F, F.col("value"))


def java_split_column(functions: Any, line: Any) -> Any:
    r"""Java's ``line.toLowerCase().split("\\W+")`` with the functions of ``functions``
    (``pyspark.sql.functions`` or :mod:`streamtable.functions`) over the string column ``line``.
    """
    F = functions
    lower = F.lower(line)
    trimmed = F.regexp_replace(lower, r"\W+$", "")
    only_separators = (lower != "") & (trimmed == "")
    return F.when(only_separators, F.array().cast("array<string>")).otherwise(
        F.split(trimmed, r"\W+")
    )


def final_counts(records: Iterable[tuple[bytes | None, bytes | None, int]]) -> dict[str, int]:
    """The last count per word in the output topic."""
    out: dict[str, int] = {}
    for k, v, _ts in records:
        if k is not None and v is not None:
            out[k.decode("utf-8")] = struct.unpack(">q", v)[0]
    return out


def run(
    lines: list[str],
    bootstrap_servers: str | None = None,
    *,
    state_dir: str | None = None,
    echo: Any = print,
    top: int = 10,
) -> dict[str, Any]:
    """Produce ``lines``, count the words until caught up, print the top words and the figures."""
    from streamtable.demo._harness import (
        demo_config,
        ensure_topics,
        kafka_cluster,
        read_topic,
        run_until_caught_up,
    )
    from streamtable.demo.flights_data import produce_records

    t0 = time.monotonic()
    with kafka_cluster(bootstrap_servers) as bootstrap:
        ensure_topics(bootstrap, {INPUT_TOPIC: 2, OUTPUT_TOPIC: 2}, recreate=True)
        produce_records(
            bootstrap, INPUT_TOPIC, [(None, line.encode("utf-8"), None) for line in lines]
        )
        app = KafkaStreams(
            build_topology(), demo_config("streamtable-demo-wordcount", bootstrap, state_dir)
        )
        processing_s, _metrics = run_until_caught_up(app)
        counts = final_counts(read_topic(bootstrap, OUTPUT_TOPIC))
    words = sum(len(java_split_words(line)) for line in lines)
    for word, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:top]:
        echo(f"{word!r:>20} {n:>8}")
    figures = {
        "lines": len(lines),
        "words": words,
        "distinct_words": len(counts),
        "processing_s": round(processing_s, 2),
        "words_per_s": round(words / processing_s),
        "wall_s": round(time.monotonic() - t0, 2),
    }
    echo(json.dumps(figures))
    return figures
