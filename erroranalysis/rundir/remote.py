"""A run directory on object storage (`--out s3://bucket/runs/x`), with a commit protocol that needs no rename.

Object stores have no atomic rename and no directories: what they do guarantee is that one PUT of one object is
atomic (a reader sees the old object or the new one, whole). So a run is written in three steps:

1. the run is built, stage by stage, in a local mirror (`remote-runs/<hash of the URL>` under `files.cache_root()`),
   with the local commit protocol (docs/run-directory.md);
2. every file of the finished run is uploaded under a fresh staging prefix, `URL/objects/<generation>/...`,
   which no reader looks at yet;
3. `URL/manifest.json` is written last, in one PUT: the commit point. It names the generation and every object of
   it with its size and sha256 (`objects`). The previous generation's objects are deleted after that.

Readers (`fetch`) read the manifest first and then only the objects it names, each checked against its sha256:
what it does not name (a generation a failed or concurrent publish left behind) is ignored. Every name taken from
the manifest (the generation, each file) goes through `confine.entry` before it becomes a key or a local path.

What is atomic: the switch from one committed run to the next (one object). What is not: two writers publishing to
the same URL at once (the last manifest wins; the loser's objects are left unnamed, not mixed in), and a reader
that fetches while an old generation is being deleted after a new commit (it fails with a sha256 or missing-object
error and fetches again). The labels database stays on a local disk (SQLite needs file locks).
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from erroranalysis.core import files, storage
from erroranalysis.core.errors import RunError
from erroranalysis.rundir import confine
from erroranalysis.rundir.artifacts import LOCK, MANIFEST, STAGING

OBJECTS = "objects"


def mirror_of(url: storage.ObjectPath) -> Path:
    """The local folder a remote run is built in (and fetched into): a cache, keyed by the URL."""
    return files.cache_root() / "remote-runs" / hashlib.sha256(str(url).encode()).hexdigest()[:16]


def remote_manifest(url: storage.ObjectPath) -> dict | None:
    """The committed manifest at `url`, or None when there is none."""
    target = url / MANIFEST
    if not target.is_file():
        return None
    try:
        return json.loads(target.read_bytes())
    except ValueError:
        raise RunError(f"{target}: not a readable manifest; replace it or choose another --out.") from None


@contextmanager
def create_remote_run(url, *, overwrite: bool = False, create_local, **manifest) -> Iterator:
    """`create_run` for a URL: the run is built in the local mirror and published when the block succeeds (see the
    module's docstring); `create_local` is `create_run` itself. The run's `remote` names the URL."""
    url = storage.ObjectPath.parse(str(url)) if not isinstance(url, storage.ObjectPath) else url
    previous = remote_manifest(url)
    if previous is not None and not overwrite:
        raise RunError(f"{url}: a run already exists here; pass --overwrite to replace it.")
    local = mirror_of(url)
    if previous and previous.get("run_id"):  # the replacement is the same run: its labels stay its own
        manifest.setdefault("run_id", previous["run_id"])
    with create_local(local, overwrite=True, **manifest) as run:
        run.remote = str(url)
        yield run
    publish(local, url, previous)
    run.remote = str(url)


def publish(local: Path, url: storage.ObjectPath, previous: dict | None = None) -> dict:
    """Upload the run at `local` under a new generation, then commit its manifest; returns the manifest."""
    generation = f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:8]}"
    prefix = f"{OBJECTS}/{generation}"
    fs, base = url.filesystem()
    named = {}
    with storage.errors(url):
        for path in sorted(p for p in local.rglob("*") if p.is_file()):
            rel = path.relative_to(local).as_posix()
            if rel == MANIFEST or rel.split("/")[0] in (STAGING, LOCK) or rel.startswith("."):
                continue
            confine.entry(local, rel, "file")
            with open(path, "rb") as src, fs.open_output_stream(f"{base}/{prefix}/{rel}") as dst:
                for block in iter(lambda: src.read(1 << 22), b""):
                    dst.write(block)
            named[rel] = files.hash_files([path])
        manifest = json.loads((local / MANIFEST).read_text())
        manifest[OBJECTS] = {"generation": generation, "files": named}
        with fs.open_output_stream(f"{base}/{MANIFEST}") as dst:  # the commit point
            dst.write(json.dumps(manifest, indent=2).encode())
    old = ((previous or {}).get(OBJECTS) or {}).get("generation")
    if old and old != generation:
        _delete_generation(url, old)
    return manifest


def _delete_generation(url: storage.ObjectPath, generation: str) -> None:
    """Remove a superseded generation's objects (best effort: a leftover is ignored by every reader)."""
    confine.entry(Path("/nonexistent-run"), f"{OBJECTS}/{generation}", "generation")
    fs, base = url.filesystem()
    try:
        fs.delete_dir(f"{base}/{OBJECTS}/{generation}")
    except OSError:
        pass


def fetch(url, local: str | Path | None = None) -> Path:
    """Download the committed run at `url` into `local` (default: its mirror): only the objects its manifest
    names, each checked against its sha256, the manifest written last. Returns the local folder."""
    url = storage.ObjectPath.parse(str(url)) if not isinstance(url, storage.ObjectPath) else url
    manifest = remote_manifest(url)
    if manifest is None:
        raise RunError(f"{url}: no run here (no {MANIFEST}); check the URL.")
    objects = manifest.get(OBJECTS) or {}
    generation, named = objects.get("generation"), objects.get("files")
    if not isinstance(generation, str) or not isinstance(named, dict):
        raise RunError(f"{url / MANIFEST}: names no objects; publish the run again.")
    local = Path(local) if local is not None else mirror_of(url)
    local.mkdir(parents=True, exist_ok=True)
    confine.entry(local, f"{OBJECTS}/{generation}", "generation")  # a plain name, before it becomes a key
    fs, base = url.filesystem()
    for rel, expected in named.items():
        target = confine.entry(local, rel, "file")
        key = f"{base}/{OBJECTS}/{generation}/{rel}"
        target.parent.mkdir(parents=True, exist_ok=True)

        def download(tmp: Path, key=key) -> None:
            with storage.errors(url / rel), fs.open_input_stream(key) as src, open(tmp, "wb") as dst:
                for block in iter(lambda: src.read(1 << 22), b""):
                    dst.write(block)

        files.atomic_write(target, download)
        if files.hash_files([target])["sha256"] != (expected or {}).get("sha256"):
            target.unlink()
            raise RunError(f"{url / rel}: its content does not match the manifest (a publish in progress?); fetch "
                           "again.")
    files.write_json(local / MANIFEST, manifest)
    return local
