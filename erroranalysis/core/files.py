"""File writes that a reader never sees half done, and checksums of what was written.

Every write goes to a temporary file in the target's folder and is moved into place with `os.replace`, so a reader
sees the old file or the new one, never a mix; a write that fails or is interrupted leaves the old file and no
temporary behind. A file system that fills up is reported as one line naming the file (`DiskFullError`).

Durable, as SQLite is: the temporary file is fsynced before the rename and its folder after it, so once a write
returns, a power loss leaves the new file (never a name pointing at data that never reached the disk).

Modes, one rule for every writer: files are `0666 & ~umask`, folders `0777 & ~umask`, as `open` and `mkdir` make
them, so a run shared on a disk is readable by whom the user's umask lets read it. `mkstemp` and `mkdtemp` make
0600 and 0700: their results are given the rule's mode before they are moved into place.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable

import numpy as np

from erroranalysis.core.errors import UserError

_FULL = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT}


class DiskFullError(UserError):
    """The disk (or a size limit such as `ulimit -f`) refused a write; nothing was replaced."""


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Call `write(tmp_path)`, then move the result onto `path` in one step."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    os.chmod(tmp, file_mode())  # mkstemp's 0600 would hide the file from the people the umask lets read it
    try:
        with disk_errors(path):
            write(Path(tmp))
            sync_file(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    sync_dir(path.parent)
    return path


def umask() -> int:
    """The process's umask. Read from /proc where Linux tells it, so no other thread ever runs under a changed
    umask; elsewhere set and restored at once."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def file_mode() -> int:
    """The mode of a new file: what `open` gives, `0666 & ~umask`."""
    return 0o666 & ~umask()


def folder_mode() -> int:
    """The mode of a new folder: what `mkdir` gives, `0777 & ~umask`."""
    return 0o777 & ~umask()


@contextmanager
def folder_build(target: Path, done: str):
    """A fresh hidden folder beside `target` to build it in; when the block ends it is fsynced, with every file in
    it, and moved onto `target` in one rename, its parent fsynced after (a cache folder that is whole or absent,
    even after a power loss). Another process that finished the same build first wins: its `target` (holding the
    file `done`) is kept. A failed block leaves no folder behind."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    os.chmod(tmp, folder_mode())  # mkdtemp's 0700, to the rule's mode
    try:
        yield tmp
        sync_tree(tmp)
        try:
            os.replace(tmp, target)
        except OSError:  # another process finished the same build first
            if not (target / done).is_file():
                raise
        sync_dir(target.parent)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextmanager
def scratch_folder(parent: str | Path, prefix: str):
    """`new_scratch(parent, prefix)`, removed when the block ends."""
    folder = new_scratch(parent, prefix)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def new_scratch(parent: str | Path, prefix: str) -> Path:
    """A fresh hidden folder `<prefix><host>-<pid>-*` in `parent` for a command's scratch files (the caller removes
    it). A process killed with SIGKILL cannot remove its own, so the folders of this host's processes that are gone
    are swept here first (a live process's, or another host's on a shared disk, are left alone)."""
    parent = Path(parent)
    parent.mkdir(parents=True, exist_ok=True)
    for old in left_by_dead([p.name for p in parent.glob(f"{prefix}*")], prefix):
        shutil.rmtree(parent / old, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=scratch_stem(prefix), dir=parent))


def scratch_stem(prefix: str) -> str:
    """`<prefix><host>-<pid>-`: how a scratch folder's name says which process owns it."""
    return f"{prefix}{_host()}-{os.getpid()}-"


def left_by_dead(names: list[str], prefix: str) -> list[str]:
    """Of scratch folders' `names` (`scratch_stem`), those this host's processes that are gone left behind (a live
    process's, or another host's, are left alone)."""
    host = _host()
    dead = []
    for name in names:
        if name.startswith(f"{prefix}{host}-"):
            pid = name[len(prefix) + len(host) + 1:].split("-", 1)[0]
            if pid.isdigit() and not _alive(int(pid)):
                dead.append(name)
    return dead


def _host() -> str:
    """This machine's name and its PID namespace (`name.<inode>`): containers that share a host name (host
    networking) have PID namespaces of their own, where another's live pid may be no process at all."""
    import socket

    name = socket.gethostname().replace("-", "_")
    try:
        return f"{name}.{os.stat('/proc/self/ns/pid').st_ino}"
    except OSError:  # no /proc (macOS): one namespace
        return name


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def sync_file(path: str | Path) -> None:
    """fsync one file: its content is on disk when this returns."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_dir(path: str | Path) -> None:
    """fsync a folder: the names created, renamed or removed in it are on disk when this returns."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:  # pragma: no cover - platforms that cannot open a folder (Windows)
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - file systems that refuse fsync on a folder
        pass
    finally:
        os.close(fd)


def sync_tree(path: str | Path) -> None:
    """fsync a file, or a folder of files with every file and folder under it (a stage's staging area)."""
    path = Path(path)
    if not path.is_dir():
        sync_file(path)
        return
    for root, folders, names in os.walk(path):
        for name in names:
            if not os.path.islink(os.path.join(root, name)):
                sync_file(os.path.join(root, name))
        sync_dir(root)


class disk_errors:
    """Turn "no space left" and "file too large" into a one-line DiskFullError naming `path`."""

    def __init__(self, path: str | Path):
        self.path = path

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if is_disk_full(exc):
            raise DiskFullError(f"{self.path}: not written, {disk_full_reason(exc)}; free some space (or raise the "
                                "limit) and run the command again.") from None
        return False


def is_disk_full(exc: BaseException | None) -> bool:
    return isinstance(exc, OSError) and exc.errno in _FULL


def disk_full_reason(exc: OSError) -> str:
    if exc.errno == errno.ENOSPC:
        return "the disk is full"
    return "the disk quota is used up" if exc.errno == errno.EDQUOT else "the file size limit was reached"


def write_text(path: str | Path, text: str) -> Path:
    return atomic_write(path, lambda p: p.write_text(text, encoding="utf-8"))


def write_json(path: str | Path, obj: Any) -> Path:
    return write_text(path, dumps(obj) + "\n")


def dumps(obj: Any) -> str:
    """JSON as every artifact is written: indented, numpy values as Python ones, NaN refused."""
    return json.dumps(obj, indent=2, default=json_default, allow_nan=False)


def jsonable(obj: Any) -> Any:
    """`obj` with numpy values as Python ones, paths as strings and NaN, infinities and pandas' missing values as
    None: what `json.dumps(..., allow_nan=False)` writes as strict JSON (reports, `--json` output)."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, np.ndarray)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return float(obj) if np.isfinite(obj) else None
    if isinstance(obj, Path):
        return str(obj)
    if obj is not None and not isinstance(obj, (str, int, bool)):
        import pandas as pd

        try:
            if pd.isna(obj):
                return None
        except (TypeError, ValueError):
            pass
    return obj


ROW_GROUP = 65_536  # rows per Parquet row group: a block of `engines.blocks` reads whole row groups, so a stage
# reading an artifact block by block reads each row once (pandas' default, 1M-row groups, made 16 blocks read 1M)


def write_parquet(path: str | Path, df) -> Path:
    return atomic_write(path, parquet_writer(df))


def parquet_writer(df) -> Callable[[Path], None]:
    """What writes frame `df` as a run's Parquet table at a path (row groups of `ROW_GROUP` rows)."""
    return lambda path: df.to_parquet(path, index=False, row_group_size=ROW_GROUP)


def write_npy(path: str | Path, array: np.ndarray) -> Path:
    return atomic_write(path, npy_writer(array))


def npy_writer(array: np.ndarray, dtype=None) -> Callable[[Path], None]:
    """What writes `array` (as `dtype`, in C order) as a .npy file at a path: for `atomic_write` and
    `core.shards.write` (np.save given a path would append `.npy` to a temporary file's name)."""
    def save(path: Path) -> None:
        with open(path, "wb") as f:
            np.save(f, np.ascontiguousarray(array, dtype=dtype))

    return save


def json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def digest(path: str | Path) -> dict:
    """`{"sha256", "bytes"}` of a file, or of a folder of shards (its files in name order, names included)."""
    path = Path(path)
    if path.is_dir():
        return hash_files(sorted(p for p in path.rglob("*") if p.is_file()), root=path)
    return hash_files([path])


def hash_files(paths, root: Path | None = None) -> dict:
    """One sha256 over `paths` in order (each file's name relative to `root` first, when given), and their size."""
    sha = hashlib.sha256()
    size = 0
    for file in paths:
        if root is not None:
            sha.update(Path(file).relative_to(root).as_posix().encode() + b"\0")
        with open(file, "rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                sha.update(block)
                size += len(block)
    return {"sha256": sha.hexdigest(), "bytes": size}


def cache_root() -> Path:
    """Where erroranalysis keeps what it builds once (embeddings, GGUF conversions, the static model, remote-run
    mirrors): `$ERRORANALYSIS_CACHE_DIR`, else `$XDG_CACHE_HOME/erroranalysis`, else `~/.cache/erroranalysis`."""
    explicit = os.environ.get("ERRORANALYSIS_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")) / "erroranalysis"


def remembered_sha256(file: str | Path, memo_dir: Path) -> str:
    """The file's SHA-256, remembered under `memo_dir` by (path, size, mtime) so later calls do not re-read a large
    file. An unwritable memo folder only costs the hash next time."""
    file = Path(file).resolve()
    stat = file.stat()
    memo = memo_dir / hashlib.blake2b(f"{file}|{stat.st_size}|{stat.st_mtime_ns}".encode(), digest_size=16).hexdigest()
    if memo.is_file():
        value = memo.read_text().strip()
        if len(value) == 64:
            return value
    value = hash_files([file])["sha256"]
    try:
        write_text(memo, value + "\n")
    except OSError:
        pass
    return value


def size_of(path: str | Path) -> int:
    path = Path(path)
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size
