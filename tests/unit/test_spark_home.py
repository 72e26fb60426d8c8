"""The Spark home of local sessions: links to the installed package's folders, no ``python``."""

from __future__ import annotations

import os
import sys
import zipfile

import pytest

from streamtable.runtime import spark_home as sh

pytestmark = pytest.mark.unit

VERSION = b'__version__: str = "9.9.9"\n'


def _package(root, version=VERSION, with_zip=True):
    """A pip-installed PySpark's layout: jars, bin, python/lib/pyspark.zip, version.py."""
    pkg = root / "pyspark"
    (pkg / "jars").mkdir(parents=True)
    (pkg / "jars" / "spark-core.jar").write_bytes(b"jar")
    (pkg / "bin").mkdir()
    (pkg / "version.py").write_bytes(VERSION)
    (pkg / "python" / "lib").mkdir(parents=True)
    if with_zip:
        with zipfile.ZipFile(pkg / "python" / "lib" / "pyspark.zip", "w") as z:
            z.writestr("pyspark/version.py", version)
    return pkg


@pytest.fixture(autouse=True)
def _no_spark_home(monkeypatch):
    monkeypatch.delenv("SPARK_HOME", raising=False)


def test_the_home_links_every_folder_of_the_package_but_python(tmp_path):
    pkg = _package(tmp_path)
    home = sh.local_spark_home(pkg, tmp_path / "cache")
    assert home is not None and home.parent == tmp_path / "cache"
    assert sorted(os.listdir(home)) == ["bin", "conf", "jars", "version.py"]
    assert not (home / "conf").exists()  # dangling until the package has a conf folder
    assert (home / "jars").resolve() == (pkg / "jars").resolve()
    assert not (home / "python" / "lib" / "pyspark.zip").exists()
    # made once: the next start finds it as it is
    mtime = home.stat().st_mtime_ns
    assert sh.local_spark_home(pkg, tmp_path / "cache") == home
    assert home.stat().st_mtime_ns == mtime


def test_another_package_or_version_gets_another_home_and_a_stale_one_is_remade(tmp_path):
    a = _package(tmp_path / "a")
    b = _package(tmp_path / "b")
    cache = tmp_path / "cache"
    home_a, home_b = sh.local_spark_home(a, cache), sh.local_spark_home(b, cache)
    assert home_a is not None and home_b is not None and home_a != home_b
    # a home whose links lead elsewhere (e.g. copied caches) is made again
    (home_a / "jars").unlink()
    (home_a / "jars").symlink_to(b / "jars")
    assert sh.local_spark_home(a, cache) == home_a
    assert (home_a / "jars").resolve() == (a / "jars").resolve()
    # so is one made before the package gained a folder (a conf folder is Spark's config)
    (a / "conf").mkdir()
    (a / "conf" / "spark-defaults.conf").write_text("spark.ui.enabled false\n")
    (a / "sbin").mkdir()
    assert sh.local_spark_home(a, cache) == home_a
    assert (home_a / "conf" / "spark-defaults.conf").is_file() and (home_a / "sbin").is_dir()
    assert [p.name for p in cache.iterdir() if p.name.startswith(".")] == []  # no leftovers


def test_a_home_made_meanwhile_by_another_process_is_kept(tmp_path):
    pkg = _package(tmp_path)
    cache = tmp_path / "cache"
    made = sh.local_spark_home(pkg, cache)
    assert made is not None
    inode = made.stat().st_ino
    # another start that found no home builds one after this one's was moved in: it keeps
    # this one (a JVM may be launching from it) and leaves nothing behind
    sh._make(made, pkg)
    assert made.stat().st_ino == inode
    assert sorted(p.name for p in cache.iterdir()) == [made.name]


def test_nothing_changes_with_spark_home_set_or_without_the_archives_own_version(
    tmp_path, monkeypatch
):
    cache = tmp_path / "cache"
    assert sh.local_spark_home(_package(tmp_path / "nozip", with_zip=False), cache) is None
    other = _package(tmp_path / "other", version=b'__version__: str = "1.0.0"\n')
    assert sh.local_spark_home(other, cache) is None
    # a pip install that downloaded a Spark distribution of its own uses that one
    dist = _package(tmp_path / "dist")
    (dist / "spark-distribution" / "jars").mkdir(parents=True)
    assert sh.local_spark_home(dist, cache) is None
    # Spark's Python processes run another interpreter (another virtual environment)
    ok = _package(tmp_path / "ok")
    assert sh.local_spark_home(ok, cache, python=str(tmp_path / "venv" / "bin" / "python")) is None
    assert sh.local_spark_home(ok, cache, python=sys.executable) is not None
    monkeypatch.setenv("SPARK_HOME", str(tmp_path / "distribution"))
    assert sh.local_spark_home(_package(tmp_path / "ok2"), cache) is None


def test_an_unwritable_cache_or_no_home_folder_means_the_package_itself(tmp_path, monkeypatch):
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    assert sh.local_spark_home(_package(tmp_path), blocked / "cache") is None

    def no_home():
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.delenv("STREAMTABLE_SPARK_HOME_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setattr(sh.Path, "home", staticmethod(no_home))
    assert sh.local_spark_home(tmp_path / "pyspark") is None


def test_spark_home_is_set_only_while_the_jvm_is_launched(tmp_path):
    with sh.launched_with(tmp_path):
        assert os.environ["SPARK_HOME"] == str(tmp_path)
    assert "SPARK_HOME" not in os.environ
    with sh.launched_with(None):
        assert "SPARK_HOME" not in os.environ
