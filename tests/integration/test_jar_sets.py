"""The real jar sets resolve, and the Spark one adds nothing the PySpark wheel already ships."""

import re
from pathlib import Path

import pyspark
import pytest

from streamtable.runtime.jars import resolve_jars

pytestmark = pytest.mark.integration


def artifact(name: str) -> str:
    """``kafka-clients-3.9.2.jar`` -> ``kafka-clients``; ``spark-core_2.13-4.3.0.jar`` -> ``spark-core``."""  # noqa: E501
    scala = re.match(r"(.+?)_2\.1[23]-", name)
    if scala:
        return scala.group(1)
    return re.sub(r"-\d+(\.\d+)+.*\.jar$", "", name)


def test_spark_kafka_jars_are_minimal_and_do_not_duplicate_the_wheel():
    jars = resolve_jars("spark-kafka")
    names = {artifact(p.name) for p in jars}
    assert names == {
        "spark-sql-kafka-0-10",
        "spark-token-provider-kafka-0-10",
        "kafka-clients",
        "commons-pool2",
    }
    wheel = {artifact(p.name) for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    assert not names & wheel


def test_broker_jars_have_main_and_storage_tool():
    import zipfile

    jars = resolve_jars("broker")
    core = next(p for p in jars if p.name.startswith("kafka_2.13-"))
    entries = set(zipfile.ZipFile(core).namelist())
    assert {"kafka/Kafka.class", "kafka/tools/StorageTool.class"} <= entries
    assert any(p.name.startswith("log4j-slf4j-impl-") for p in jars)
