"""Who is writing a run: an exclusive `flock` on `<run>/.lock`, held by the one process that writes it.

A stage left `running` in the manifest by a process that is gone holds no lock, so readers can tell a live stage
from an interrupted one without trusting a pid (pids are reused; the host may be another machine sharing the
folder, where flock still works on NFSv4). The lock is per process and re-entrant: the stages that follow
inference in one command take it once.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import stat
import time
from pathlib import Path

from erroranalysis.core.errors import RunError
from erroranalysis.rundir.artifacts import LOCK

_HELD: dict[str, list] = {}  # realpath of the run -> [fd, depth]
WAIT_SECONDS = 2.0  # how long a writer waits for readers' brief shared probes to pass


def host() -> str:
    return socket.gethostname()


class RunLock:
    """`with RunLock(run_path, holder):` holds the run for writing; raises RunError when another process does."""

    def __init__(self, run_path: str | Path, describe=None):
        self.path = Path(run_path)
        self.describe = describe  # () -> str: what the other writer is doing, for the message

    def __enter__(self) -> RunLock:
        key = os.path.realpath(self.path)
        if key in _HELD:
            _HELD[key][1] += 1
            return self
        try:
            fd = open_lock(self.path, os.O_RDWR | os.O_CREAT)
        except OSError as exc:
            raise RunError(f"{self.path / LOCK}: cannot be opened as the run's lock ({exc.strerror}); remove it "
                           "and run the command again.") from None
        deadline = time.monotonic() + WAIT_SECONDS
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN) or time.monotonic() > deadline:
                    os.close(fd)
                    busy = self.describe() if self.describe else "another process is writing it"
                    raise RunError(f"{self.path}: {busy}; wait for it to finish (or stop it), then run the "
                                   "command again.") from None
                time.sleep(0.05)
        _HELD[key] = [fd, 1]
        return self

    def __exit__(self, *exc) -> None:
        key = os.path.realpath(self.path)
        entry = _HELD.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            del _HELD[key]
            fcntl.flock(entry[0], fcntl.LOCK_UN)
            os.close(entry[0])


def held_here(run_path: str | Path) -> bool:
    return os.path.realpath(run_path) in _HELD


def writer_alive(run_path: str | Path) -> bool:
    """Whether some process (this one included) holds the run's lock. Readers only probe: a shared lock taken and
    dropped at once, which never blocks the writer for long."""
    if held_here(run_path):
        return True
    try:
        fd = open_lock(run_path, os.O_RDONLY)
    except OSError:
        return False  # no lock file (no writer ever held it here: a copied or read-only run), or not a lock
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def open_lock(run_path: str | Path, flags: int) -> int:
    """A descriptor of the run's `.lock`, opened without blocking and without following a symlink, and only when
    it is a regular file: a FIFO there would block every reader's open until killed, a symlink would lock (or
    create) a file outside the run. OSError otherwise."""
    fd = os.open(Path(run_path) / LOCK, flags | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0), 0o644)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", str(Path(run_path) / LOCK))
    return fd


def forget_after_fork() -> None:
    """A forked child does not hold its parent's locks (flock is per open file, shared with the parent)."""
    _HELD.clear()
