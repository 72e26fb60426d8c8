"""The worker daemon freezes its objects before it forks a worker, and only in itself: a
worker that forks in turn keeps its own objects collectable."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.unit

#: Runs the daemon's main() with a stand-in for PySpark's manager that makes objects, forks a
#: "worker" as the manager does, and has that worker fork once more. Exit code 0: the worker
#: found the manager's new objects frozen and its own child froze nothing of the worker's.
_SCRIPT = textwrap.dedent(
    """
    import gc, os, sys
    import pyspark.daemon
    from streamtable.runtime import worker_daemon

    def manager():
        made = [[i] for i in range(5000)]  # made by the manager, before its first fork
        before = gc.get_freeze_count()
        pid = os.fork()
        if pid == 0:  # the worker
            if gc.get_freeze_count() < before + len(made) // 2:  # (a few may be untracked)
                os._exit(1)
            own = [[i] for i in range(5000)]
            frozen = gc.get_freeze_count()
            child = os.fork()
            if child == 0:
                os._exit(0 if gc.get_freeze_count() == frozen else 2)
            _, status = os.waitpid(child, 0)
            os._exit(os.waitstatus_to_exitcode(status) or (3 if len(own) != 5000 else 0))
        _, status = os.waitpid(pid, 0)
        sys.exit(os.waitstatus_to_exitcode(status))

    pyspark.daemon.manager = manager
    worker_daemon.main()
    """
)


def test_the_daemon_freezes_before_each_fork_and_a_worker_s_own_fork_does_not():
    proc = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, timeout=120)
    assert proc.returncode == 0, {
        1: "the worker's inherited objects were not frozen",
        2: "a worker's fork froze",
    }.get(proc.returncode, proc.stderr.decode()[-2000:])


#: A process with Spark's jar on its path the way Spark lists ``spark-core``'s for its Python
#: workers, and a user's jar: a namespace package made from the jar's ``org`` folder only (as the
#: standard library's ``copy`` makes one when it tries Jython's ``org.python.core``) and one,
#: ``google``, spanning the jar and a folder with a module; then the daemon's clean-up. Prints
#: what is left of the jars as JSON.
_JAR_SCRIPT = textwrap.dedent(
    """
    import importlib, json, os, sys, zipfile
    jar, other, folder = sys.argv[1:4]
    with zipfile.ZipFile(jar, "w") as z:
        for name in ("org/", "org/example/", "org/example/Foo.class", "google/", "google/a.proto"):
            z.writestr(name, b"")  # jars list their folders
    with zipfile.ZipFile(other, "w") as z:
        z.writestr("users_module.py", "VALUE = 1\\n")
    os.makedirs(os.path.join(folder, "google"))
    with open(os.path.join(folder, "google", "mine.py"), "w") as f:
        f.write("VALUE = 2\\n")
    sys.path[:0] = [folder]
    sys.path += [jar, other]
    try:
        from org.python.core import PyStringMap  # noqa: F401 - what copy.py tries
    except ImportError:
        pass
    import google
    assert "org" in sys.modules, "the jar's org folder should make a namespace package"
    assert any(p.startswith(jar) for p in google.__path__), list(google.__path__)
    from streamtable.runtime import worker_daemon

    worker_daemon._drop_spark_jars()
    importlib.invalidate_caches()
    try:
        from org.python.core import PyStringMap  # noqa: F401,F811
    except ImportError:
        pass
    import google.mine, users_module
    print(json.dumps({
        "on_path": [p for p in sys.path if p in (jar, other)],
        "importers": [k for k in sys.path_importer_cache if k.startswith(jar)],
        "org": "org" in sys.modules,
        "google": [p for p in google.__path__ if p.startswith(jar)],
        "imported": [google.mine.VALUE, users_module.VALUE],
    }))
    """
)


def test_spark_s_jar_leaves_the_daemon_s_path_with_its_importers(tmp_path):
    jar, other = tmp_path / "spark-core_2.13-4.3.0.jar", tmp_path / "users-code.jar"
    proc = subprocess.run(
        [sys.executable, "-c", _JAR_SCRIPT, str(jar), str(other), str(tmp_path / "folder")],
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    left = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    # only Spark's jar goes; a namespace package partly elsewhere stays, without the jar
    assert left == {
        "on_path": [str(other)],
        "importers": [],
        "org": False,
        "google": [],
        "imported": [2, 1],
    }


def test_a_jar_stays_on_the_path_when_pyspark_is_not_found_without_it(tmp_path):
    from streamtable.runtime.worker_daemon import without_spark_jars

    jar = str(tmp_path / "spark-core_2.13-4.3.0.jar")
    no_pyspark = [str(tmp_path)]
    assert without_spark_jars([jar, *no_pyspark]) == [jar, *no_pyspark]
    with_pyspark = [p for p in sys.path if p]  # the installed pyspark is on the test's path
    assert without_spark_jars([jar, *with_pyspark]) == with_pyspark
