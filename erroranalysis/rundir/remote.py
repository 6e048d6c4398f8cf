"""A run directory on object storage (`--out s3://bucket/runs/x`), with a commit protocol that needs no rename.

Object stores have no atomic rename and no directories: what they do guarantee is that one PUT of one object is
atomic (a reader sees the old object or the new one, whole). So a run is written in three steps:

1. the run is built, stage by stage, in a local mirror (`remote-runs/<hash of the URL>` under `files.cache_root()`),
   with the local commit protocol (docs/run-directory.md);
2. every file of the finished run is uploaded under a fresh staging prefix, `URL/objects/<generation>/...`,
   which no reader looks at yet. Under a distributed engine the workers have already written the per-row shards
   under `URL/objects/<generation>/shards/` (the generation is chosen when the run starts; `commit.Staging.shards`),
   and the mirror holds a pointer for each such artifact (`core.shards`): those shards are named where they lie
   (each listing entry's `key`), not uploaded;
3. `URL/manifest.json` is written last, in one PUT: the commit point. It names the generation and every object of
   it with its size and sha256 (`objects`). The previous generation's objects are deleted after that.

Readers (`fetch`) read the manifest first and then only the objects it names, each checked against its sha256:
what it does not name (a generation a failed or concurrent publish left behind) is ignored, and one that a killed
process of this host left is deleted by the next run written there (`_sweep_generations`). Every name taken from
the manifest (the generation, each file) goes through `confine.entry` before it becomes a key or a local path.

What is atomic: the switch from one committed run to the next (one object). What is not: two writers publishing to
the same URL at once (the last manifest wins; the loser's objects are left unnamed, not mixed in), and a reader
that fetches while an old generation is being deleted after a new commit (it fails with a sha256 or missing-object
error and fetches again). The labels database stays on a local disk (SQLite needs file locks).
"""

from __future__ import annotations

import json
import shutil
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from erroranalysis.core import files, shards, storage
from erroranalysis.core.errors import DataError, RunError
from erroranalysis.core.storage import mirror_of
from erroranalysis.rundir import commit, confine, swap
from erroranalysis.rundir.artifacts import LOCK, MANIFEST, STAGING

OBJECTS = "objects"
GENERATION = "gen-"  # a generation's name: `new_generation`
SHARDS = "shards"  # under a generation: the shards a distributed stage's workers wrote there (Staging.shards)


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
        raise RunError(f"{url}: a run already exists here; pass --overwrite to replace it.",
                       python=f"{url}: a run already exists here; pass overwrite=True to replace it.")
    _sweep_generations(url)
    local = mirror_of(url)
    if previous and previous.get("run_id"):  # the replacement is the same run: its labels stay its own
        manifest.setdefault("run_id", previous["run_id"])
    generation = new_generation()
    with create_local(local, overwrite=True, **manifest) as run:
        run.remote = str(url)
        building = run.path.resolve()  # every stage's Staging of this folder, in this process, finds the prefix
        commit.SHARDS_AT[building] = url / OBJECTS / generation / SHARDS
        try:
            yield run
        except BaseException:  # no manifest will name this generation: the shards its workers wrote there go
            _delete_generation(url, generation)
            raise
        finally:
            commit.SHARDS_AT.pop(building, None)
    publish(local, url, previous, generation)
    run.remote = str(url)


def new_generation() -> str:
    """`gen-<host>-<pid>-<time>-<hex>`: which process made it (`files.scratch_stem`), so that one a killed process
    left can be swept (`_sweep_generations`)."""
    return f"{files.scratch_stem(GENERATION)}{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:8]}"


def committed_generation(manifest: dict | None) -> str | None:
    """The generation a committed manifest names (None: no manifest, or one that names no objects)."""
    return ((manifest or {}).get(OBJECTS) or {}).get("generation")


def _sweep_generations(url: storage.ObjectPath) -> None:
    """Delete the generations this host's dead processes left at `url` that its manifest does not name (a run killed
    before its commit: its workers' shards). The manifest is read after the owners were found dead: a generation
    committed before its process died is named by it, or by none once a later commit superseded (and deleted) it."""
    dead = shards.left_by_dead(url / OBJECTS, GENERATION)
    if dead:
        named = committed_generation(remote_manifest(url))
        for generation in dead:
            if generation != named:
                _delete_generation(url, generation)


def publish(local: Path, url: storage.ObjectPath, previous: dict | None = None, generation: str | None = None) -> dict:
    """Upload the run at `local` under a generation (new, or the one its workers wrote shards under), then commit
    its manifest; returns the manifest. Shards already on object storage (a pointer, `core.shards`) are named
    where they are, not uploaded again."""
    generation = generation or new_generation()
    prefix = f"{OBJECTS}/{generation}"
    fs, base = url.filesystem()
    named = {}
    with storage.errors(url):
        for path in sorted(p for p in local.rglob("*") if p.is_file()):
            rel = path.relative_to(local).as_posix()
            if rel == MANIFEST or rel.split("/")[0] in (STAGING, LOCK) or rel.startswith("."):
                continue
            confine.entry(local, rel, "file")
            if path.name == shards.POINTER:
                named.update(_pointed(path.parent, rel.rsplit("/", 1)[0], url, prefix))
                continue
            with open(path, "rb") as src, fs.open_output_stream(f"{base}/{prefix}/{rel}") as dst:
                for block in iter(lambda: src.read(1 << 22), b""):
                    dst.write(block)
            named[rel] = files.hash_files([path])
        manifest = json.loads((local / MANIFEST).read_text())
        manifest[OBJECTS] = {"generation": generation, "files": named}
        with fs.open_output_stream(f"{base}/{MANIFEST}") as dst:  # the commit point
            dst.write(json.dumps(manifest, indent=2).encode())
    old = committed_generation(previous)
    if old and old != generation:
        _delete_generation(url, old)
    return manifest


def _pointed(folder: Path, rel: str, url: storage.ObjectPath, prefix: str) -> dict:
    """The listing entries of the shards a pointer names, each with its key (they must lie in this generation)."""
    pointed = shards.pointer(folder)
    where = str(pointed["url"])
    if not where.startswith(f"{url}/{prefix}/"):
        raise RunError(f"{folder / shards.POINTER}: names shards at {where}, outside this run's objects "
                       f"({url}/{prefix}/); run the stage again.")
    key = where[len(str(url)) + 1:]
    return {f"{rel}/{name}": {**digest, "key": f"{key}/{name}"} for name, digest in pointed["shards"].items()}


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
    names, each checked against its sha256, the manifest written last. The whole listing is checked before the
    first download (`check_listing`), and the run is fetched into a fresh folder that then trades places with
    `local` in one step: a refused or failed fetch leaves the old mirror as it was. Returns the local folder."""
    url = storage.ObjectPath.parse(str(url)) if not isinstance(url, storage.ObjectPath) else url
    manifest = remote_manifest(url)
    if manifest is None:
        raise RunError(f"{url}: no run here (no {MANIFEST}); check the URL.")
    objects = manifest.get(OBJECTS) or {}
    generation, named = objects.get("generation"), objects.get("files")
    if not isinstance(generation, str) or not isinstance(named, dict):
        raise RunError(f"{url / MANIFEST}: names no objects; publish the run again.")
    local = Path(local) if local is not None else mirror_of(url)
    if local.is_dir() and not (local / MANIFEST).is_file() and any(local.iterdir()):
        raise RunError(f"{local}: holds files but no run, which the fetch would replace; fetch into a new folder "
                       "(or one an earlier fetch made).")
    confine.entry(local, f"{OBJECTS}/{generation}", "generation")  # a plain name, before it becomes a key
    check_listing(url, local, named, generation)
    local.parent.mkdir(parents=True, exist_ok=True)
    fresh = swap.building_path(local)
    fresh.mkdir()
    try:
        _download(url, generation, named, fresh)
        files.write_json(fresh / MANIFEST, _as_fetched(manifest, named, fresh))
        files.sync_dir(fresh)
        if local.is_dir() and not local.is_symlink():
            swap.exchange(fresh, local)  # `fresh` now holds the old mirror
        else:
            fresh.rename(local)
        files.sync_dir(local.parent)
    finally:
        shutil.rmtree(fresh, ignore_errors=True)
    return local


def check_listing(url: storage.ObjectPath, local: Path, named: dict, generation: str) -> None:
    """Every name the manifest lists, checked before anything is fetched: a plain relative path (`confine.entry`),
    not the manifest itself, the lock or the staging area (which never belong in a mirror), not both a file and a
    folder of other files, given a sha256, and a key (a shard its worker wrote in place) of plain names in this
    generation; else RunError naming the entry."""
    where = f"{url / MANIFEST}: the object list"
    fix = "; nothing was changed: publish the run again from a run you trust."
    for rel, expected in named.items():
        confine.entry(local, rel, "file")
        if rel == MANIFEST or rel.split("/")[0] in (LOCK, STAGING):
            raise RunError(f"{where} names {rel!r}, which is not a run file and never belongs in a mirror{fix}")
        if not isinstance(expected, dict) or not isinstance(expected.get("sha256"), str):
            raise RunError(f"{where} gives {rel!r} no sha256{fix}")
        key = expected.get("key")
        if key is not None and not (isinstance(key, str) and key.startswith(f"{OBJECTS}/{generation}/{SHARDS}/")
                                    and _plain(url, key)):
            raise RunError(f"{where} gives {rel!r} the key {key!r}, which is not in its generation's shards{fix}")
    for rel in named:
        folders = [rel[:i] for i, c in enumerate(rel) if c == "/"]
        clash = next((f for f in folders if f in named), None)
        if clash is not None:
            raise RunError(f"{where} names {clash!r} as a file and {rel!r} inside it, as a folder{fix}")


def _download(url: storage.ObjectPath, generation: str, named: dict, folder: Path) -> None:
    """Each listed object into `folder`, checked against its sha256."""
    fs, base = url.filesystem()
    for rel, expected in named.items():
        target = folder / rel
        key = f"{base}/{expected.get('key') or f'{OBJECTS}/{generation}/{rel}'}"
        target.parent.mkdir(parents=True, exist_ok=True)

        def download(tmp: Path, key=key, rel=rel) -> None:
            with storage.errors(url / rel), fs.open_input_stream(key) as src, open(tmp, "wb") as dst:
                for block in iter(lambda: src.read(1 << 22), b""):
                    dst.write(block)

        files.atomic_write(target, download)
        if files.hash_files([target])["sha256"] != expected["sha256"]:
            raise RunError(f"{url / rel}: its content does not match the manifest (a publish in progress?); fetch "
                           "again.")


def _plain(url: storage.ObjectPath, key: str) -> bool:
    """Whether `key` has only plain names between single slashes (`storage.check_key`'s rule)."""
    try:
        storage.check_key(str(url), key)
    except DataError:
        return False
    return True


def _as_fetched(manifest: dict, named: dict, folder: Path) -> dict:
    """The manifest as the fetched mirror holds it: an artifact whose shards were named where their workers wrote
    them was recorded by its pointer's digest, and is now a folder of those shards, digested again (each shard was
    checked against its sha256 as it came)."""
    pointed = {rel.split("/", 1)[0] for rel, entry in named.items() if "key" in entry}
    artifacts = manifest.get("artifacts") or {}
    for name in pointed & set(artifacts):
        if isinstance(artifacts[name], dict):
            artifacts[name] = {**artifacts[name], **files.digest(folder / name)}
    return manifest
