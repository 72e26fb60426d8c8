"""EmbeddedPostgres set-up checks that need no running server: finding the programs, the
unprivileged server user as root, and the errors that say what to do."""

import os
import pathlib
import pwd
import socket
import stat
import tempfile

import pytest

from streamtable.errors import EnvironmentSetupError
from streamtable.platform import EmbeddedPostgres, PostgresError
from streamtable.platform.pg_binaries import (
    PostgresBinaries,
    ServerUser,
    find_postgres_binaries,
    server_user,
    unreachable_ancestor,
)


def _fake_bindir(folder: pathlib.Path, version: str) -> pathlib.Path:
    folder.mkdir(parents=True)
    for name in ("initdb", "postgres"):
        exe = folder / name
        exe.write_text(f"#!/bin/sh\necho 'postgres (PostgreSQL) {version} (Debian)'\n")
        exe.chmod(0o755)
    return folder


def test_missing_binaries_name_the_package_to_install(tmp_path):
    with pytest.raises(EnvironmentSetupError, match=r"apt-get install postgresql") as err:
        find_postgres_binaries(env={"PATH": str(tmp_path)}, debian_root=tmp_path / "none")
    assert "initdb, postgres" in str(err.value)
    assert "STREAMTABLE_POSTGRES_BINDIR" in str(err.value)


def test_newest_debian_version_folder_wins(tmp_path):
    _fake_bindir(tmp_path / "9.6" / "bin", "9.6.24")
    _fake_bindir(tmp_path / "13" / "bin", "13.4")
    _fake_bindir(tmp_path / "16" / "bin", "16.2")
    (tmp_path / "17" / "bin").mkdir(parents=True)  # a client-only install: no server programs
    found = find_postgres_binaries(env={"PATH": ""}, debian_root=tmp_path)
    assert found == PostgresBinaries(tmp_path / "16" / "bin", 16)
    assert found.initdb == tmp_path / "16" / "bin" / "initdb"


def test_bindir_override_must_hold_the_programs(tmp_path):
    with pytest.raises(EnvironmentSetupError, match=r"STREAMTABLE_POSTGRES_BINDIR=.*does not hold"):
        find_postgres_binaries(env={"STREAMTABLE_POSTGRES_BINDIR": str(tmp_path)})
    bindir = _fake_bindir(tmp_path / "bin", "15.3")
    found = find_postgres_binaries(env={"STREAMTABLE_POSTGRES_BINDIR": str(bindir)})
    assert found.version == 15


def test_too_old_server_is_refused(tmp_path):
    _fake_bindir(tmp_path / "9.6" / "bin", "9.6.24")
    with pytest.raises(EnvironmentSetupError, match=r"PostgreSQL 9 .* too old.*10\+"):
        find_postgres_binaries(env={"PATH": ""}, debian_root=tmp_path)


def test_server_user_is_none_unless_root():
    assert server_user(env={}, euid=1000) is None


def test_server_user_as_root_names_the_fix_when_the_account_is_missing():
    with pytest.raises(EnvironmentSetupError, match=r"refuses to run as root.*useradd"):
        server_user(env={"STREAMTABLE_POSTGRES_USER": "no-such-user-zz"}, euid=0)


def test_server_user_must_not_be_root():
    with pytest.raises(EnvironmentSetupError, match=r"is root \(uid 0\)"):
        server_user(env={"STREAMTABLE_POSTGRES_USER": "root"}, euid=0)


def test_unreachable_ancestor_finds_a_private_folder():
    # not under tmp_path: pytest's own base folder is private (0700) to the user running it
    with tempfile.TemporaryDirectory() as base:
        os.chmod(base, 0o755)
        _check_private_folder(pathlib.Path(base))


def _check_private_folder(base):
    private = base / "private"
    private.mkdir(mode=0o700)
    other = ServerUser("someone", uid=os.getuid() + 4242, gid=os.getgid() + 4242)
    assert unreachable_ancestor(private / "pg" / "data", other) == private
    private.chmod(0o711)
    assert unreachable_ancestor(private / "pg" / "data", other) is None


def _binaries(tmp_path):
    return PostgresBinaries(_fake_bindir(tmp_path / "bin", "15.3"), 15)


def test_port_in_use_is_reported_before_anything_starts(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        pg = EmbeddedPostgres(port=port, binaries=_binaries(tmp_path))
        with pytest.raises(PostgresError, match=rf"port {port} on 127.0.0.1 is in use"):
            pg.start()


def test_data_dir_too_deep_for_a_unix_socket(tmp_path):
    deep = tmp_path / ("d" * 120)
    pg = EmbeddedPostgres(data_dir=deep, binaries=_binaries(tmp_path))
    with pytest.raises(PostgresError, match=r"too deep.*107-byte limit"):
        pg.start()


def _postgres_user_exists():
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return False
    return True


@pytest.mark.skipif(
    os.geteuid() != 0 or not _postgres_user_exists(), reason="needs root and a postgres user"
)
def test_as_root_a_data_dir_the_server_user_cannot_reach_is_refused(tmp_path):
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    assert not private.stat().st_mode & stat.S_IXOTH
    pg = EmbeddedPostgres(data_dir=private / "pg", binaries=_binaries(tmp_path))
    with pytest.raises(PostgresError, match=r"runs as user 'postgres'.*cannot enter .*private"):
        pg.start()


def test_properties_before_start_say_it_is_not_started():
    pg = EmbeddedPostgres()
    with pytest.raises(PostgresError, match="has not been started"):
        pg.port  # noqa: B018
    with pytest.raises(PostgresError, match="is not running"):
        pg.execute("SELECT 1")
    assert "stopped" in repr(pg)


def test_free_ports_are_distinct():
    """The servers started here (a broker's two listeners, a Spark master and its workers)
    take several ports at once; two separate probes could get the same one from the kernel."""
    from streamtable.broker._node import free_ports

    for _ in range(50):
        ports = free_ports(6)
        assert len(set(ports)) == 6
