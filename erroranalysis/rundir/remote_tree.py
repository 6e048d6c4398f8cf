"""Runs under an object-storage prefix, for the app (`erroranalysis ui s3://bucket/runs/`): listed by their committed
manifests, each opened from a local mirror.

A run published with `--out s3://bucket/runs/x` (`remote.py`) is committed by its `manifest.json`, which names one
generation of objects. The app lists `<prefix>/<run>/manifest.json` and `<prefix>/<group>/<run>/manifest.json`
(the depths a local runs folder is searched to), and opens a run from `<mirror>/<key>`, a folder under
`files.cache_root()/remote-trees/<hash of the prefix>`: fetched with `remote.fetch` (every object checked against
its sha256, the manifest written last) the first time, and again only when the remote manifest names another
generation (the run was published again). So a page reads local files, and what it read stays until the run's
commit changes. The mirror is the app's cache, not a place to write: run files are never changed through it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from erroranalysis.core import files, storage
from erroranalysis.core.errors import RunError
from erroranalysis.rundir import confine, remote
from erroranalysis.rundir.artifacts import MANIFEST

MAX_DEPTH = 2


def mirror_root(url: storage.ObjectPath) -> Path:
    """The local folder the runs under `url` are mirrored in, keyed by the prefix."""
    return files.cache_root() / "remote-trees" / hashlib.sha256(str(url).encode()).hexdigest()[:16]


def list_runs(url: storage.ObjectPath) -> list[str]:
    """Keys (`run`, `group/run`) of the committed runs under `url`, sorted; a folder whose name is not a plain
    name is left out (it never becomes a local path)."""
    import pyarrow.fs as pafs

    fs, base = url.filesystem()
    keys, level = [], [""]
    with storage.errors(url):
        for _ in range(MAX_DEPTH):
            below = []
            for prefix in level:
                selector = pafs.FileSelector(f"{base}/{prefix}".rstrip("/"), allow_not_found=True, recursive=False)
                for info in fs.get_file_info(selector):
                    name = info.base_name
                    if info.type != pafs.FileType.Directory or name.startswith(".") or name == remote.OBJECTS \
                            or not _plain(name):
                        continue
                    key = f"{prefix}/{name}".lstrip("/")
                    if fs.get_file_info(f"{base}/{key}/{MANIFEST}").type == pafs.FileType.File:
                        keys.append(key)
                    else:
                        below.append(key)
            level = below
    return sorted(keys)


def open_run(url: storage.ObjectPath, key: str, mirror: Path) -> Path:
    """The local folder of run `key` under `url`, fetched into `mirror` unless it already holds the run's
    committed generation."""
    local = confine.entry(mirror, key, "run")
    run_url = url / key
    manifest = remote.remote_manifest(run_url)
    if manifest is None:
        raise RunError(f"{run_url}: no run here (no {MANIFEST}); pick a run on the Runs page.")
    if remote.committed_generation(manifest) is None:
        raise RunError(f"{run_url / MANIFEST}: names no objects; publish the run again.")
    if remote.committed_generation(_local_manifest(local)) != remote.committed_generation(manifest):
        remote.fetch(run_url, local)
    return local


def _local_manifest(local: Path) -> dict | None:
    try:
        return json.loads((local / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _plain(name: str) -> bool:
    return bool(name) and name not in (".", "..") and "/" not in name and "\\" not in name
