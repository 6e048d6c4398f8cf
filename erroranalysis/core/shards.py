"""Folders of shards (`part-<first row><suffix>`), on a local disk or in object storage: one rule for writing,
listing and opening them, which every writer and reader of a sharded artifact goes through.

A per-row artifact of a distributed stage is a folder of shards, each written whole by the worker that computed it.
Where the run is published to object storage (`--out s3://...` under `--engine ray`), the workers write their
shards straight there, beside the run's other objects (`rundir.remote`), and the run's local folder holds, in place
of the shards, a pointer: `<artifact>/shards.json`, naming the prefix and each shard with its sha256 and size.
Every reader takes the three forms alike (a file, a folder of shards, a folder holding the pointer), so the stages
after one read the shards where they are.

A shard on object storage is one PUT (atomic: a reader sees all of it or none), followed by a small sidecar
`<shard>.digest` holding its sha256 and size, which the driver reads to write the pointer (the workers hash what
they wrote; the driver reads no shard's bytes). A task that Ray runs twice writes the same shard and sidecar again.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import secrets
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

from erroranalysis.core import files, storage
from erroranalysis.core.errors import RunError, UserError

POINTER = "shards.json"
DIGEST = ".digest"
SHARD = "part-{start:012d}{suffix}"  # a shard's name: its first row, so name order is row order


def location(folder) -> Path | storage.ObjectPath:
    """A folder as a local Path, or a URL (str or ObjectPath) as an ObjectPath."""
    return storage.ObjectPath.parse(str(folder)) if storage.is_url(folder) else Path(folder)


def write(folder, name: str, fill: Callable[[Path], None], digest: bool = True) -> None:
    """Write shard `name` of `folder` with `fill(path)`, which writes a local file: atomically in place on a local
    disk (the folder made as needed); on object storage, into a local temporary file that is then uploaded in one
    PUT, with its sidecar unless `digest` is False (scratch, which no pointer names)."""
    folder = location(folder)
    if isinstance(folder, Path):
        files.atomic_write(folder / name, fill)
        return
    fs, key = folder.filesystem()
    with tempfile.TemporaryDirectory(prefix="erroranalysis-shard-") as tmp:
        local = Path(tmp) / name
        fill(local)
        sha, size = hashlib.sha256(), 0
        with storage.errors(folder / name), open(local, "rb") as src, fs.open_output_stream(f"{key}/{name}") as dst:
            for block in iter(lambda: src.read(1 << 22), b""):
                sha.update(block)
                size += len(block)
                dst.write(block)
    if not digest:
        return
    with storage.errors(folder / name), fs.open_output_stream(f"{key}/{name}{DIGEST}") as dst:
        dst.write(json.dumps({"sha256": sha.hexdigest(), "bytes": size}).encode())


def write_file(target, fill: Callable[[Path], None], digest: bool = False) -> None:
    """`write` of the file at `target` (a path or a URL): a scratch file by default (no digest)."""
    target = location(target)
    write(target.parent, target.name, fill, digest)


def names(folder, suffix: str) -> list[str]:
    """The shard names (`part-*<suffix>`) in `folder`, sorted (name order is row order): listed on a local disk
    or in object storage, or read from the folder's pointer."""
    folder = location(folder)
    if isinstance(folder, storage.ObjectPath):
        return listed(folder, suffix)
    pointed = pointer(folder)
    if pointed is not None:
        return sorted(n for n in pointed["shards"] if _is_shard(n, suffix))
    return sorted(p.name for p in folder.glob(f"part-*{suffix}"))


def listed(folder, suffix: str = "", prefix: str = "part-") -> list[str]:
    """The names of the files `<prefix>*<suffix>` directly in `folder` (a local folder or a prefix on object
    storage), sorted; none when the folder is not there. For scratch folders, which hold no pointer."""
    folder = location(folder)
    if isinstance(folder, storage.ObjectPath):
        found = storage.listing(folder)
    else:
        found = [p.name for p in folder.iterdir() if p.is_file()] if folder.is_dir() else []
    return sorted(n for n in found if _named(n, prefix, suffix))


def parts(path, suffix: str) -> list[Path | storage.ObjectPath]:
    """An artifact's files in row order: the file (or object) itself, a folder's shards, or the shards its pointer
    names."""
    path = location(path)
    if (isinstance(path, Path) and not path.is_dir()) or (isinstance(path, storage.ObjectPath) and path.is_file()):
        return [path]
    pointed = pointer(path) if isinstance(path, Path) else None
    base = storage.ObjectPath.parse(pointed["url"]) if pointed is not None else path
    return [base / name for name in names(path, suffix)]


def shared(path):
    """Where every node of a cluster reads the artifact at `path`: the URL of its shards when `path` is a local
    folder holding their pointer (a worker need not see this disk, where the pointer lies), else `path` as given."""
    if path is None or storage.is_url(path) or not Path(path).is_dir():
        return path
    pointed = pointer(Path(path))
    return path if pointed is None else location(pointed["url"])


def pointer(folder: Path) -> dict | None:
    """The pointer in a local artifact folder ({"url", "shards": {name: {"sha256", "bytes"}}}), checked, or None."""
    file = Path(folder) / POINTER
    if not file.is_file():
        return None
    try:
        doc = json.loads(file.read_text(encoding="utf-8"))
        url, shards = doc["url"], doc["shards"]
        _own_run(file, storage.ObjectPath.parse(url))
        if not isinstance(shards, dict) or not all(
                _is_shard(n, "") and "/" not in n and isinstance(d, dict) and isinstance(d.get("sha256"), str)
                for n, d in shards.items()):
            raise ValueError("shards")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise RunError(f"{file}: not a readable shard pointer ({type(exc).__name__}); run the stage that writes it "
                       "again.") from None
    return doc


def _own_run(file: Path, url: storage.ObjectPath) -> None:
    """A pointer names shards of its own run only: the run folder holding it must be named as the local mirror of a
    prefix of `url` is (`storage.mirror_of`: `remote-runs/<hash of the URL>`, or the hidden sibling an `--overwrite`
    builds it in). The name, not the cache root, is checked, since a worker's cache root may differ from the
    driver's. A pointer in any other folder (a run copied or crafted elsewhere) is refused, and one in a mirror reads
    nothing outside the URL that mirror is named for."""
    run = file.resolve().parent.parent  # <run>/<artifact>/shards.json
    parts = url.url.split("/")
    for end in range(3, len(parts)):  # scheme://bucket/...: each prefix with at least a bucket
        mirror = storage.mirror_of(storage.ObjectPath("/".join(parts[:end])))
        if run.parent.name == mirror.parent.name and (run.name == mirror.name
                                                      or run.name.startswith(f".{mirror.name}.new-")):
            return
    raise RunError(f"{file}: names shards at {url}, which is not this run's (only the local mirror of a run on "
                   "object storage holds pointers); fetch the run again with erroranalysis show URL.")


def seal(remote, folder: Path) -> bool:
    """Write the pointer for the shards at `remote` into the local `folder`, from their sidecars (read a few at a
    time); False, writing nothing, when no shard is there."""
    remote = location(remote)
    listed = storage.listing(remote)
    shards = sorted(n for n in listed if _is_shard(n, ""))
    if not shards:
        return False
    missing = [n for n in shards if n + DIGEST not in listed]
    if missing:
        raise RunError(f"{remote / missing[0]}: written without its digest (a worker died between the two "
                       "writes?); run the stage again.")
    with ThreadPoolExecutor(8) as pool:
        digests = list(pool.map(lambda n: json.loads((remote / (n + DIGEST)).read_bytes()), shards))
    Path(folder).mkdir(parents=True, exist_ok=True)
    files.write_json(Path(folder) / POINTER, {"url": str(remote), "shards": dict(zip(shards, digests))})
    return True


def dataset(path):
    """A pyarrow dataset over a Parquet artifact: a file, a folder of shards, or the shards its pointer names."""
    import pyarrow.dataset as ds

    path = location(path)
    if isinstance(path, Path) and pointer(path) is None:
        return ds.dataset(str(path), format="parquet")
    found = parts(path, ".parquet")
    fs = found[0].filesystem()[0] if found else None
    return ds.dataset([p.key for p in found], filesystem=fs, format="parquet")


def open_parquet(file):
    """A pyarrow ParquetFile of a local file or an object (a URL string or ObjectPath)."""
    import pyarrow.parquet as pq

    if storage.is_url(file):
        file = location(file)
        fs, key = file.filesystem()
        with storage.errors(file):
            return pq.ParquetFile(fs.open_input_file(key))
    return pq.ParquetFile(file)


def read_table(file, columns=None):
    """A Parquet file's (or object's) table, whole or its `columns`."""
    return open_parquet(file).read(columns=columns)


def read_bytes(file) -> bytes:
    """A file's or an object's bytes."""
    return location(file).read_bytes()


def load_npz(file) -> dict:
    """The arrays of an .npz file or object, read whole."""
    import io

    import numpy as np

    with np.load(io.BytesIO(read_bytes(file)), allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def load_npy(file):
    """An array shard (or file): memory-mapped on a local disk, read whole from object storage."""
    import io

    import numpy as np

    if storage.is_url(file):
        return np.load(io.BytesIO(location(file).read_bytes()), allow_pickle=False)
    return np.load(file, mmap_mode="r", allow_pickle=False)


def npy_rows(file, start: int = 0, stop: int | None = None):
    """Rows `start`..`stop` of an array shard: sliced from a memory map on a local disk; from object storage, only
    their bytes are read, after the header."""
    import numpy as np

    if not storage.is_url(file):
        return np.asarray(load_npy(file)[start:stop])
    shape, dtype, offset = _remote_header(str(file))
    stop = shape[0] if stop is None else min(stop, shape[0])
    row = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize
    path = location(file)
    fs, key = path.filesystem()
    with storage.errors(path), fs.open_input_file(key) as f:
        f.seek(offset + start * row)
        data = f.read(max(0, stop - start) * row)
    return np.frombuffer(data, dtype=dtype).reshape((max(0, stop - start), *shape[1:]))


def npy_shape(file) -> tuple[int, ...]:
    """An array shard's shape, from its header alone."""
    return _remote_header(str(file))[0] if storage.is_url(file) else load_npy(file).shape


@functools.lru_cache(maxsize=4096)  # a shard never changes once written: its generation's objects are immutable
def _remote_header(url: str):
    import numpy as np

    path = location(url)
    fs, key = path.filesystem()
    with storage.errors(path), fs.open_input_file(key) as f:
        version = np.lib.format.read_magic(f)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read(f)
        if fortran and len(shape) > 1:
            raise ValueError("a Fortran-ordered shard")  # the writers write C order
        return shape, dtype, f.tell()


def remove(folder) -> None:
    """Delete a folder of shards on object storage (best effort: unnamed objects are ignored by every reader)."""
    folder = location(folder)
    if isinstance(folder, storage.ObjectPath):
        fs, key = folder.filesystem()
        try:
            fs.delete_dir(key)
        except OSError:
            pass


def left_by_dead(prefix, name: str) -> list[str]:
    """The folders `<name><host>-<pid>-*` directly under `prefix` (a URL) that this host's processes that are gone
    left there (`files.left_by_dead`); none when the listing fails (a sweep is best effort)."""
    import pyarrow.fs as pafs

    base = location(prefix)
    fs, key = base.filesystem()
    try:
        with storage.errors(base):
            found = fs.get_file_info(pafs.FileSelector(key, allow_not_found=True))
    except (OSError, UserError):
        return []
    return files.left_by_dead([i.base_name for i in found if i.type == pafs.FileType.Directory], name)


@contextlib.contextmanager
def scratch(prefix, name: str):
    """A fresh prefix `<prefix>/scratch/<name><host>-<pid>-<token>` on object storage for what a command's workers
    write and other workers read back (so no node need share a disk with another), deleted when the block ends.
    Those a killed process of this host left are swept first, as `files.new_scratch` does on a disk."""
    base = location(prefix) / "scratch"
    for old in left_by_dead(base, name):
        remove(base / old)
    folder = base / f"{files.scratch_stem(name)}{secrets.token_hex(4)}"
    try:
        yield folder
    finally:
        remove(folder)


def _is_shard(name: str, suffix: str) -> bool:
    return _named(name, "part-", suffix)


def _named(name: str, prefix: str, suffix: str) -> bool:
    return name.startswith(prefix) and name.endswith(suffix) and not name.endswith(DIGEST)
