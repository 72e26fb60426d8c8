import json
import os
import stat

import pytest

from streamtable.errors import EnvironmentSetupError
from streamtable.runtime import jars

pytestmark = pytest.mark.unit


@pytest.fixture
def no_tools(monkeypatch, tmp_path):
    """PATH with nothing on it and no JAVA_HOME."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.delenv("JAVA_HOME", raising=False)


def _fake_exe(folder, name, script="#!/bin/sh\nexit 0\n"):
    folder.mkdir(parents=True, exist_ok=True)
    exe = folder / name
    exe.write_text(script)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def test_missing_java_names_fix(no_tools):
    with pytest.raises(EnvironmentSetupError, match=r"install a JDK 17\+ .*openjdk-17.*JAVA_HOME"):
        jars.java_executable()


def test_java_home_without_java_is_reported(no_tools, monkeypatch, tmp_path):
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    with pytest.raises(EnvironmentSetupError, match="JAVA_HOME=.*has no bin/java"):
        jars.java_executable()


def test_java_home_wins_over_path(no_tools, monkeypatch, tmp_path):
    java = _fake_exe(tmp_path / "jdk" / "bin", "java")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    assert jars.java_executable() == str(java)


def test_old_java_rejected(no_tools, monkeypatch, tmp_path):
    _fake_exe(
        tmp_path / "jdk" / "bin", "java", "#!/bin/sh\necho 'openjdk version \"1.8.0_392\"' >&2\n"
    )
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    with pytest.raises(EnvironmentSetupError, match="version 8, but 17"):
        jars.check_java()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('openjdk version "17.0.15" 2025-04-15', 17),
        ('java version "1.8.0_1"', 8),
        ('openjdk version "21" 2023-09-19', 21),
        ("garbage", None),
    ],
)
def test_parse_java_version(text, expected):
    assert jars._parse_java_version(text) == expected


def test_missing_maven_names_fix(monkeypatch, tmp_path):
    monkeypatch.setattr(jars.shutil, "which", lambda name: None if name == "mvn" else "/x/" + name)
    with pytest.raises(EnvironmentSetupError, match=r"install Maven \(apt-get install maven\)"):
        jars.maven_executable()


def test_resolve_without_maven_raises_before_touching_cache(monkeypatch, tmp_path):
    _fake_exe(tmp_path / "bin", "java")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(EnvironmentSetupError, match="Maven not found"):
        jars.resolve_jars("broker", cache_dir=tmp_path / "cache")
    assert not (tmp_path / "cache").exists()


def _cache_folder(root, component, properties=None):
    key = jars._cache_key(jars.pom_path(component).read_bytes(), properties or {})
    return root / f"{component}-{key}"


def test_cache_hit_skips_maven_and_java(no_tools, tmp_path):
    folder = _cache_folder(tmp_path, "spark-kafka")
    folder.mkdir(parents=True)
    for name in ("b.jar", "a.jar"):
        (folder / name).write_bytes(b"PK")
    (folder / jars._MARKER).write_text("{}")
    # neither java nor mvn is on PATH: a cache hit must not need them
    assert jars.resolve_jars("spark-kafka", cache_dir=tmp_path) == [
        folder / "a.jar",
        folder / "b.jar",
    ]


def test_incomplete_folder_is_not_a_hit(no_tools, tmp_path):
    folder = _cache_folder(tmp_path, "broker")
    folder.mkdir(parents=True)
    (folder / "half.jar").write_bytes(b"PK")  # no completion marker: an interrupted copy
    with pytest.raises(EnvironmentSetupError, match="Java not found"):
        jars.resolve_jars("broker", cache_dir=tmp_path)


def test_properties_change_the_cache_key():
    pom = b"<project/>"
    assert jars._cache_key(pom, {}) != jars._cache_key(pom, {"kafka.version": "4.3.0"})
    assert jars._cache_key(pom, {}) == jars._cache_key(pom, {})


def test_cache_root_env_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("STREAMTABLE_JAR_CACHE", raising=False)
    assert jars.cache_root() == tmp_path / "xdg" / "streamtable" / "jars"
    monkeypatch.setenv("STREAMTABLE_JAR_CACHE", str(tmp_path / "mine"))
    assert jars.cache_root() == tmp_path / "mine"


def test_failed_resolution_carries_maven_tail(monkeypatch, tmp_path):
    _fake_exe(tmp_path / "bin", "java")
    _fake_exe(
        tmp_path / "bin",
        "mvn",
        "#!/bin/sh\necho '[ERROR] Could not find artifact org.example:nope:jar:9.9'\nexit 1\n",
    )
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(
        EnvironmentSetupError, match=r"(?s)'broker'.*Could not find artifact org\.example"
    ):
        jars.resolve_jars("broker", cache_dir=tmp_path / "cache")
    # nothing half-done is left behind as a cache hit
    assert not any((tmp_path / "cache").glob("broker-*/" + jars._MARKER))


def test_successful_resolution_writes_marker(monkeypatch, tmp_path):
    _fake_exe(tmp_path / "bin", "java")
    # a fake mvn that "copies" one jar into -DoutputDirectory and records its arguments
    _fake_exe(
        tmp_path / "bin",
        "mvn",
        f"""#!/bin/sh
echo "$@" >> {tmp_path}/mvn-calls
for a in "$@"; do case "$a" in -DoutputDirectory=*) d="${{a#-DoutputDirectory=}}";; esac; done
echo PK > "$d/kafka-clients-1.0.jar"
""",
    )
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    first = jars.resolve_jars(
        "broker", cache_dir=tmp_path / "cache", properties={"kafka.version": "4.3.1"}
    )
    second = jars.resolve_jars(
        "broker", cache_dir=tmp_path / "cache", properties={"kafka.version": "4.3.1"}
    )
    assert [p.name for p in first] == ["kafka-clients-1.0.jar"] == [p.name for p in second]
    calls = (tmp_path / "mvn-calls").read_text().splitlines()
    assert len(calls) == 1
    assert "dependency:copy-dependencies" in calls[0] and "-Dkafka.version=4.3.1" in calls[0]
    marker = json.loads((first[0].parent / jars._MARKER).read_text())
    assert marker["jars"] == ["kafka-clients-1.0.jar"]


def test_unknown_component():
    with pytest.raises(ValueError, match="unknown jar component"):
        jars.pom_path("zookeeper")


def test_poms_ship_as_package_data():
    for component in jars.COMPONENTS:
        assert jars.pom_path(component).read_text().lstrip().startswith("<?xml")
    assert os.path.basename(jars.pom_path("broker").parent) == "broker"


def test_spark_kafka_falls_back_when_pom_versions_do_not_resolve(monkeypatch, tmp_path, caplog):
    _fake_exe(tmp_path / "bin", "java")
    # fails unless a -Dspark.version override is given, like a registry without Spark 4.3.0
    _fake_exe(
        tmp_path / "bin",
        "mvn",
        f"""#!/bin/sh
echo "$@" >> {tmp_path}/mvn-calls
case "$*" in *-Dspark.version=*) ;;
  *) echo "[ERROR] Could not find artifact spark-sql-kafka:4.3.0"; exit 1;;
esac
for a in "$@"; do case "$a" in -DoutputDirectory=*) d="${{a#-DoutputDirectory=}}";; esac; done
echo PK > "$d/spark-sql-kafka-0-10_2.13-4.2.0.jar"
""",
    )
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with caplog.at_level("INFO", logger="streamtable"):
        got = jars.resolve_jars("spark-kafka", cache_dir=tmp_path / "cache")
    assert [p.name for p in got] == ["spark-sql-kafka-0-10_2.13-4.2.0.jar"]
    assert "fallback" in caplog.text
    # the completed fallback is reused without running Maven again
    assert jars.resolve_jars("spark-kafka", cache_dir=tmp_path / "cache") == got
    assert len((tmp_path / "mvn-calls").read_text().splitlines()) == 2


def test_explicit_properties_never_fall_back(monkeypatch, tmp_path):
    _fake_exe(tmp_path / "bin", "java")
    _fake_exe(tmp_path / "bin", "mvn", "#!/bin/sh\necho '[ERROR] nope'\nexit 1\n")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(EnvironmentSetupError, match="nope"):
        jars.resolve_jars(
            "spark-kafka", cache_dir=tmp_path / "c", properties={"spark.version": "9"}
        )
