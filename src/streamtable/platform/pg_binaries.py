"""Find the PostgreSQL server programs and the unprivileged user that runs them.

Debian and Ubuntu install the server programs of major version ``N`` in
``/usr/lib/postgresql/N/bin`` and put only wrappers (``pg_ctlcluster``, sometimes a
``/usr/local/bin/pg_ctl`` link) on ``PATH``; the versioned folder is preferred.  PostgreSQL
refuses to run as root, so when the caller is root the server runs as the ``postgres`` user
(created by the ``postgresql`` package) or ``$STREAMTABLE_POSTGRES_USER``.
"""

from __future__ import annotations

import os
import pathlib
import pwd
import re
import shutil
import stat
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

from streamtable.errors import EnvironmentSetupError

__all__ = [
    "INSTALL_HINT",
    "MIN_POSTGRES_VERSION",
    "PostgresBinaries",
    "ServerUser",
    "find_postgres_binaries",
    "server_user",
    "unreachable_ancestor",
]

#: Oldest major version with logical decoding through ``pgoutput`` (Debezium's plugin).
MIN_POSTGRES_VERSION = 10

#: How to get the server programs, for error messages.
INSTALL_HINT = (
    "install them with `apt-get install postgresql` (Debian/Ubuntu, as root; `make install` "
    "does it when run as root), or set STREAMTABLE_POSTGRES_BINDIR to the folder holding "
    "initdb and postgres"
)

_DEBIAN_ROOT = pathlib.Path("/usr/lib/postgresql")
_PROGRAMS = ("initdb", "postgres")


@dataclass(frozen=True)
class PostgresBinaries:
    """The server programs of one PostgreSQL installation.

    Parameters
    ----------
    bindir : pathlib.Path
        Folder holding ``initdb`` and ``postgres``.
    version : int
        Major version, e.g. ``15``.
    """

    bindir: pathlib.Path
    version: int

    @property
    def initdb(self) -> pathlib.Path:
        """Path of ``initdb``."""
        return self.bindir / "initdb"

    @property
    def postgres(self) -> pathlib.Path:
        """Path of the ``postgres`` server."""
        return self.bindir / "postgres"


def _has_programs(folder: pathlib.Path) -> bool:
    return all(os.access(folder / name, os.X_OK) for name in _PROGRAMS)


def _major_version(postgres: pathlib.Path) -> int | None:
    """Return the major version that ``postgres --version`` prints (``15.13`` → 15)."""
    try:
        out = subprocess.run(
            [str(postgres), "--version"], capture_output=True, text=True, timeout=30, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"\)\s*(\d+)(?:\.\d+)?", out) or re.search(r"(\d+)(?:\.\d+)", out)
    return int(m.group(1)) if m else None


def _candidates(debian_root: pathlib.Path, path: str | None) -> list[pathlib.Path]:
    found: list[pathlib.Path] = []
    if debian_root.is_dir():
        versions = [d for d in debian_root.iterdir() if d.name.split(".")[0].isdigit()]
        versions.sort(key=lambda d: [int(x) for x in re.findall(r"\d+", d.name)], reverse=True)
        found += [d / "bin" for d in versions]
    on_path = shutil.which("postgres", path=path)
    if on_path:
        found.append(pathlib.Path(os.path.realpath(on_path)).parent)
    return found


def find_postgres_binaries(
    *,
    env: Mapping[str, str] | None = None,
    debian_root: pathlib.Path = _DEBIAN_ROOT,
) -> PostgresBinaries:
    """Locate ``initdb`` and ``postgres``.

    Tried in order: ``$STREAMTABLE_POSTGRES_BINDIR``; the newest ``/usr/lib/postgresql/<N>/bin``
    that has both programs; the folder of ``postgres`` on ``PATH`` (links resolved).

    Parameters
    ----------
    env : Mapping[str, str], optional
        Environment to read ``STREAMTABLE_POSTGRES_BINDIR`` and ``PATH`` from; ``os.environ``
        if omitted.
    debian_root : pathlib.Path
        Folder of Debian's versioned installations.

    Returns
    -------
    PostgresBinaries
        The folder and the major version.

    Raises
    ------
    EnvironmentSetupError
        If no folder has both programs (the message says ``apt-get install postgresql``), if
        ``$STREAMTABLE_POSTGRES_BINDIR`` lacks one, or if the version is older than
        :data:`MIN_POSTGRES_VERSION`.
    """
    env = os.environ if env is None else env
    override = env.get("STREAMTABLE_POSTGRES_BINDIR")
    if override:
        folder = pathlib.Path(override).expanduser()
        if not _has_programs(folder):
            raise EnvironmentSetupError(
                f"STREAMTABLE_POSTGRES_BINDIR={override!r} does not hold executable initdb and "
                "postgres programs; point it at a PostgreSQL bin folder such as "
                "/usr/lib/postgresql/15/bin, or unset it."
            )
        candidates = [folder]
    else:
        candidates = [d for d in _candidates(debian_root, env.get("PATH")) if _has_programs(d)]
    if not candidates:
        raise EnvironmentSetupError(
            f"PostgreSQL server programs (initdb, postgres) not found in {debian_root}/*/bin "
            f"or on PATH; {INSTALL_HINT}."
        )
    bindir = candidates[0]
    version = _major_version(bindir / "postgres")
    if version is None:
        raise EnvironmentSetupError(
            f"{bindir / 'postgres'} --version did not print a version; {INSTALL_HINT}."
        )
    if version < MIN_POSTGRES_VERSION:
        raise EnvironmentSetupError(
            f"PostgreSQL {version} in {bindir} is too old: change data capture needs "
            f"{MIN_POSTGRES_VERSION}+ (logical decoding with pgoutput); {INSTALL_HINT}."
        )
    return PostgresBinaries(bindir, version)


@dataclass(frozen=True)
class ServerUser:
    """The unprivileged account the server runs as when the caller is root.

    Parameters
    ----------
    name : str
        User name.
    uid : int
        User id (never 0).
    gid : int
        Primary group id.
    """

    name: str
    uid: int
    gid: int


def server_user(
    *, env: Mapping[str, str] | None = None, euid: int | None = None
) -> ServerUser | None:
    """Return the account to run ``initdb`` and ``postgres`` as, or ``None`` to run as the caller.

    PostgreSQL refuses to run as root.  When the caller is root, the server runs as
    ``$STREAMTABLE_POSTGRES_USER`` or else ``postgres`` (the account Debian's ``postgresql``
    package creates); its files are owned by that account.

    Parameters
    ----------
    env : Mapping[str, str], optional
        Environment; ``os.environ`` if omitted.
    euid : int, optional
        Effective user id of the caller; ``os.geteuid()`` if omitted.

    Returns
    -------
    ServerUser or None
        ``None`` when the caller is not root.

    Raises
    ------
    EnvironmentSetupError
        If the caller is root and the account does not exist or is itself root.
    """
    env = os.environ if env is None else env
    euid = os.geteuid() if euid is None else euid
    if euid != 0:
        return None
    name = env.get("STREAMTABLE_POSTGRES_USER") or "postgres"
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise EnvironmentSetupError(
            f"PostgreSQL refuses to run as root, so streamtable runs it as the unprivileged "
            f"user {name!r}, which does not exist. Create it (`apt-get install postgresql` "
            f"creates 'postgres'; or `useradd --system {name}`), or set "
            "STREAMTABLE_POSTGRES_USER to an existing unprivileged user."
        ) from None
    if entry.pw_uid == 0:
        raise EnvironmentSetupError(
            f"STREAMTABLE_POSTGRES_USER={name!r} is root (uid 0), but PostgreSQL refuses to run "
            "as root; name an unprivileged user."
        )
    return ServerUser(name, entry.pw_uid, entry.pw_gid)


def unreachable_ancestor(path: pathlib.Path, user: ServerUser) -> pathlib.Path | None:
    """Return the first existing ancestor of ``path`` that ``user`` cannot enter, if any.

    Only the permission bits are read (no ACLs).  Used to explain why the server, running as
    ``user``, could not reach a data folder under, e.g., ``/root`` (mode ``0700``).

    Parameters
    ----------
    path : pathlib.Path
        The folder the server must reach (it may not exist yet).
    user : ServerUser
        The account the server runs as.

    Returns
    -------
    pathlib.Path or None
        The blocking folder, or ``None`` if every existing ancestor is searchable by ``user``.
    """
    groups = {user.gid, *(g.gr_gid for g in _groups_of(user.name))}
    for folder in reversed(path.absolute().parents):
        try:
            st = folder.stat()
        except OSError:
            continue
        if st.st_uid == user.uid:
            ok = bool(st.st_mode & stat.S_IXUSR)
        elif st.st_gid in groups:
            ok = bool(st.st_mode & stat.S_IXGRP)
        else:
            ok = bool(st.st_mode & stat.S_IXOTH)
        if not ok:
            return folder
    return None


def _groups_of(name: str) -> list:  # type: ignore[type-arg]
    import grp

    return [g for g in grp.getgrall() if name in g.gr_mem]
