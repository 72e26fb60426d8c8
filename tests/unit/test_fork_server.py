"""The fork server of the worker daemon (``streamtable.runtime.fork_server``) and its client: a
process handed to the server runs as ``python -m`` would have run it (arguments, environment,
working folder, standard streams, exit status), from the server's imports; signals reach it;
without a server the client starts the process itself; the launcher hands over only Spark's
driver-side state schema process. No JVM: the server is forked from a plain Python process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from _support import wait_until
from streamtable.runtime import fork_server

pytestmark = pytest.mark.unit

CLIENT = str(Path(fork_server.__file__).with_name("fork_client.py"))

#: What the handed-over process reports, then (with --block) waits for its stdin to close.
_PROBE = textwrap.dedent(
    """
    import json, os, sys
    print(json.dumps({
        "pid": os.getpid(), "ppid": os.getppid(), "argv": sys.argv[1:], "cwd": os.getcwd(),
        "probe": os.environ.get("PROBE"), "name": __name__,
        "preloaded": "streamtable.runtime.fork_server" in sys.modules,
        "stdin": sys.stdin.readline() if "--read" in sys.argv else None,
    }), flush=True)
    print("to stderr", file=sys.stderr, flush=True)
    if "--block" in sys.argv:
        sys.stdin.read()
    sys.exit(int(os.environ.get("PROBE_EXIT", "0")))
    """
)

#: The "daemon": forks the server, prints its pid, lives until its stdin closes.
_DAEMON = textwrap.dedent(
    """
    import sys
    from streamtable.runtime import fork_server
    print(fork_server.start(sys.argv[1]), flush=True)
    sys.stdin.read()
    """
)


@pytest.fixture
def server(tmp_path: Path):
    """A running fork server: ``(socket path, server pid, daemon process)``."""
    path = os.path.join(str(tmp_path), "s.sock")
    daemon = subprocess.Popen(
        [sys.executable, "-c", _DAEMON, path],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    pid = int(daemon.stdout.readline())
    wait_until(lambda: os.path.exists(path), 10, "the server's socket")
    yield path, pid, daemon
    daemon.stdin.close()
    daemon.wait(10)


@pytest.fixture
def probe(tmp_path: Path) -> dict[str, str]:
    """The environment of a client whose module is ``probe_mod`` (in ``tmp_path``)."""
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "probe_mod.py").write_text(_PROBE)
    (tmp_path / "work").mkdir()
    return {"PYTHONPATH": str(tmp_path / "mods"), "PROBE": "x", "PATH": os.environ["PATH"]}


def _client(env: dict[str, str], cwd: Path, *args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-I", "-S", CLIENT, "-m", "probe_mod", *args],
        env=env,
        cwd=cwd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def test_a_handed_over_process_runs_as_python_m_would_from_the_server(server, probe, tmp_path):
    path, server_pid, _ = server
    env = {**probe, fork_server.ENV_VAR: path, "PROBE_EXIT": "3"}
    client = _client(env, tmp_path / "work", "a", "b c", "--read")
    out, err = client.communicate("from the client's stdin\n", timeout=30)
    facts = json.loads(out)
    assert client.returncode == 3, err
    assert facts["ppid"] == server_pid  # forked by the server, not started by the client
    assert facts["preloaded"]  # with the server's imports
    assert facts["argv"] == ["a", "b c", "--read"]
    assert facts["stdin"] == "from the client's stdin\n"
    assert facts["cwd"] == str(tmp_path / "work")
    assert facts["probe"] == "x"
    assert facts["name"] == "__main__"
    assert err == "to stderr\n"


def test_the_client_forwards_sigterm_to_the_handed_over_process(server, probe, tmp_path):
    path, _, _ = server
    client = _client({**probe, fork_server.ENV_VAR: path}, tmp_path / "work", "--block")
    facts = json.loads(client.stdout.readline())
    client.send_signal(signal.SIGTERM)
    assert client.wait(30) == 1  # it ended without an exit status of its own
    wait_until(lambda: not _alive(facts["pid"]), 10, "the handed-over process to end")


def test_without_a_server_the_client_starts_the_process_itself(probe, tmp_path):
    not_a_socket = tmp_path / "not-a-socket"
    not_a_socket.write_text("")
    env = {**probe, fork_server.ENV_VAR: str(not_a_socket), "PROBE_EXIT": "4"}
    client = _client(env, tmp_path / "work", "a")
    out, err = client.communicate(timeout=30)
    facts = json.loads(out)
    assert client.returncode == 4
    assert err.startswith(f"streamtable: no fork server answered at {str(not_a_socket)!r}"), err
    assert facts["pid"] == client.pid  # the client became the process (exec)
    assert facts["argv"] == ["a"]
    assert not facts["preloaded"]


def test_the_server_ends_with_the_process_that_forked_it_and_removes_its_socket(server):
    path, server_pid, daemon = server
    daemon.stdin.close()
    daemon.wait(10)
    wait_until(lambda: not os.path.exists(path), 10, "the socket to be removed")
    wait_until(lambda: not _alive(server_pid), 10, "the server to end")


def test_the_launcher_hands_over_only_the_driver_schema_process(server, probe, tmp_path):
    path, server_pid, _ = server
    launcher = fork_server.launcher(sys.executable, tmp_path / "launchers")
    assert fork_server.launcher(sys.executable, tmp_path / "launchers") == launcher  # reused
    env = {**probe, fork_server.ENV_VAR: path}

    def facts_of(script: Path) -> dict:
        run = subprocess.run(
            [str(script), "-m", "probe_mod", "z"],
            env=env,
            cwd=tmp_path / "work",
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        return json.loads(run.stdout)

    # any other module: the interpreter itself, with the same arguments, though a server runs
    facts = facts_of(launcher)
    assert (facts["ppid"], facts["preloaded"], facts["argv"]) == (os.getpid(), False, ["z"])
    # a module it hands over goes to the server (the same script, made for that module)
    handing = fork_server.launcher(sys.executable, tmp_path / "launchers", ("probe_mod",))
    assert handing != launcher
    facts = facts_of(handing)
    assert (facts["ppid"], facts["preloaded"], facts["argv"]) == (server_pid, True, ["z"])


def test_a_client_does_not_hand_over_to_a_socket_in_a_folder_others_can_open(probe, tmp_path):
    """The request carries the environment (Spark's worker secret): another user who made the
    folder first and listens there gets nothing; the client starts the process itself."""
    folder = tmp_path / "open"
    folder.mkdir(mode=0o777)
    folder.chmod(0o777)
    path = str(folder / "s.sock")
    daemon = subprocess.Popen(
        [sys.executable, "-c", _DAEMON, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        # the server itself refuses such a folder; a listener of "someone else" stands in
        assert daemon.stdout.readline().strip() == b"None"
        import socket

        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen(1)
        listener.setblocking(False)
        client = _client({**probe, fork_server.ENV_VAR: path}, tmp_path / "work")
        out, _ = client.communicate(timeout=30)
        assert json.loads(out)["pid"] == client.pid  # started by itself
        with pytest.raises(BlockingIOError):
            listener.accept()  # never connected
        listener.close()
    finally:
        daemon.stdin.close()
        daemon.wait(10)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize(
    ("extra", "python", "on"),
    [
        ({}, None, True),
        ({}, sys.executable, True),
        ({"spark.master": "spark://127.0.0.1:7077"}, None, False),
        ({"spark.python.daemon.module": "pyspark.daemon"}, None, False),
        ({"spark.pyspark.python": sys.executable}, None, False),
        ({}, "/usr/bin/python3-other", False),
        ({f"spark.executorEnv.{fork_server.ENV_VAR}": ""}, None, False),
    ],
)
def test_a_local_session_with_streamtables_daemon_gets_the_launcher(
    extra, python, on, tmp_path, monkeypatch
):
    from streamtable.runtime import spark as spark_module

    monkeypatch.setenv("STREAMTABLE_LAUNCHER_HOME", str(tmp_path))
    if python is None:
        monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    else:
        monkeypatch.setenv("PYSPARK_PYTHON", python)
    settings = {"spark.master": "local[2]", **spark_module._LOCAL_DEFAULTS, **extra}
    before = dict(settings)
    launcher = spark_module._fork_server_launcher(settings)
    key = f"spark.executorEnv.{fork_server.ENV_VAR}"
    if on:
        assert launcher is not None and Path(launcher).parent == tmp_path
        assert settings.pop(key).endswith(".sock")
        assert settings == before
    else:
        assert launcher is None
        assert settings == before


def test_a_new_socket_path_removes_the_sockets_of_drivers_that_are_gone(tmp_path, monkeypatch):
    monkeypatch.setattr(fork_server.tempfile, "gettempdir", lambda: str(tmp_path))
    folder = Path(fork_server.socket_path()).parent
    folder.mkdir(mode=0o700)
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        text=True,
        capture_output=True,
        check=True,
    )
    stale = folder / f"{int(gone.stdout)}-0123abcd.sock"
    mine = folder / f"{os.getpid()}-0123abcd.sock"
    other = folder / "notes.txt"
    for f in (stale, mine, other):
        f.write_text("")
    fork_server.socket_path()
    assert sorted(p.name for p in folder.iterdir()) == sorted([mine.name, other.name])
