"""The lock that keeps one running instance per application state directory.

Kafka Streams locks its state directory so that two instances never share local state; a
second instance fails with "state directory locked". streamtable holds an exclusive
``fcntl.flock`` on ``state.dir/application.id/.lock`` from ``KafkaStreams.start()`` until
``close()`` (or the error state). ``streamtable reset`` and ``KafkaStreams.cleanup()`` take the
same lock, so they refuse to delete the checkpoints of a running application.

The lock is advisory, held by an open file: it disappears when the holding process dies, so a
crashed application never leaves a stale lock behind.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from streamtable.errors import StateDirLockedError

__all__ = ["LOCK_FILE", "StateDirLock"]

#: Name of the lock file inside ``state.dir/application.id``.
LOCK_FILE = ".lock"


class StateDirLock:
    """An exclusive, non-blocking lock on an application's state directory.

    Parameters
    ----------
    directory : str or os.PathLike
        ``state.dir/application.id``; created if missing.

    Examples
    --------
    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> with StateDirLock(d).acquire("app"):
    ...     StateDirLock(d).is_locked()
    True
    >>> StateDirLock(d).is_locked()
    False
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.path = self.directory / LOCK_FILE
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """True while this object holds the lock."""
        return self._fd is not None

    def acquire(self, application_id: str, *, message: str | None = None) -> StateDirLock:
        """Take the lock without waiting.

        Parameters
        ----------
        application_id : str
            Named in the error message.
        message : str, optional
            The error message to raise when the lock is held elsewhere (default: Kafka Streams'
            "state directory locked", saying to stop the other instance or use another
            ``state.dir``). ``{pid}`` in it is replaced by the holder's process id.

        Returns
        -------
        StateDirLock
            ``self``, holding the lock (usable as a context manager that releases it).

        Raises
        ------
        StateDirLockedError
            If another instance (in this or another process) holds the lock.
        OSError
            If the directory or the lock file cannot be created.
        """
        if self._fd is not None:
            return self
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = _read_pid(fd)
            os.close(fd)
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            pid = holder or "unknown"
            if message is None:
                message = (
                    f"State directory {str(self.directory)!r} of application {application_id!r} "
                    "is locked by another running instance (pid {pid}). Only one instance may "
                    "use a state directory: stop the other instance (KafkaStreams.close()), or "
                    "give this one another 'state.dir'."
                )
            raise StateDirLockedError(message.replace("{pid}", str(pid))) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return self

    def release(self) -> None:
        """Release the lock (a no-op when not held). The lock file stays."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def is_locked(self) -> bool:
        """True when some instance (another object or process) holds the lock now."""
        if self._fd is not None:
            return True
        if not self.path.exists():
            return False
        try:
            probe = StateDirLock(self.directory).acquire("")
        except StateDirLockedError:
            return True
        probe.release()
        return False

    def __enter__(self) -> StateDirLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _read_pid(fd: int) -> str | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return text if text.isdigit() else None
