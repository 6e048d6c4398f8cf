"""A stage's artifacts appear together or not at all.

A stage writes its files into `<run>/.staging/<stage>-<token>/`. When it finishes, the commit

1. digests the staged files and records, in the manifest, the stage as `committing` with the whole outcome (the
   files to move, the owned files to remove, the `done` entry to record, the run-level fields the stage settles):
   from here the commit cannot be lost;
2. moves each staged file onto its final name (`os.replace`), removes the owned files it did not write again;
3. records the stage `done` and each artifact's stage, sha256 and size under `artifacts`, and drops the staging
   folder.

A process killed during step 2 leaves a `committing` record that the next writer of the run rolls forward
(`recover`): the moves are idempotent, so the run ends with the whole new set. Readers never use an artifact whose
stage is not `done`, so they see the old set or the new one. An artifact may be a folder of shards (Ray workers
write one file each); it moves as one entry.

A plan read back from a manifest is untrusted (anyone who can edit the run can write one): `check_plan` holds it to
what this module writes (a staging folder of `.staging`, the stage's own artifacts) and to the confinement rule
(`confine.entry`) before anything moves. Durability follows SQLite's order: every staged file and its folder are
fsynced before the manifest records `committing` (the commit point), and the run's folder after the moves, before
the manifest records `done`.
"""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path

from erroranalysis.core import files, shards
from erroranalysis.core.errors import RunError
from erroranalysis.rundir import confine
from erroranalysis.rundir.artifacts import STAGE_ARTIFACTS, STAGING, TABLES

SHARDS_AT: dict = {}  # the folder of a run being built for object storage -> where its workers write shards
SETTLED = ("data", "tokens")  # the manifest's fields a stage may settle at its commit (`Staging.manifest`)


def run_url(run_path):
    """The URL of the run being built at local `run_path` for object storage, or None for a run that stays on this
    disk."""
    shards_at = SHARDS_AT.get(Path(run_path).resolve())
    return None if shards_at is None else shards_at.parent.parent.parent  # <url>/objects/<generation>/shards


class Staging:
    """Where a running stage writes: `file(name)` is the staging path of artifact `name` (a file, or a folder of
    shards); `facts` are extra fields for the stage's manifest entry; `manifest` the run's own fields (of
    `SETTLED`) that only this stage could count, recorded by its commit with its artifacts (a token run's workers
    count the texts cut): a kill leaves both or neither."""

    def __init__(self, run_path: Path, stage: str):
        self.stage, self.run_path = stage, Path(run_path)
        self.remote = SHARDS_AT.get(Path(run_path).resolve())  # a run built for object storage: its workers' prefix
        self.remote_shards: dict = {}
        self.manifest: dict = {}
        self.dir = confine.entry(run_path, f"{STAGING}/{stage}-{secrets.token_hex(4)}", "staging folder")
        made = not self.dir.parent.exists()
        self.dir.mkdir(parents=True)
        files.sync_dir(self.dir.parent)  # the folder's name is on disk before any file in it is written
        if made:
            files.sync_dir(run_path)
        self.facts: dict = {}

    def file(self, name: str) -> Path:
        if name not in STAGE_ARTIFACTS[self.stage]:
            raise ValueError(f"stage {self.stage!r} does not own {name!r}; add it to rundir.STAGE_ARTIFACTS")
        return self.dir / name

    def shards(self, name: str, engine=None):
        """Where the workers of a distributed stage write artifact `name`'s shards: its staging folder, or, for a
        run published to object storage (`--out s3://...`), straight under the run's objects there, which the
        commit seals into a pointer (`core.shards`): the workers need not see this disk."""
        target = self.file(name)
        if self.remote is None or not getattr(engine, "distributed", False):
            return target
        self.remote_shards[name] = self.remote / self.dir.name / name
        return self.remote_shards[name]

    def write_json(self, name: str, obj) -> Path:
        return files.write_json(self.file(name), obj)

    def write_text(self, name: str, text: str) -> Path:
        return files.write_text(self.file(name), text)

    def write_parquet(self, name: str, frame, engine=None):
        """Write table `name`, refused when it has a column erroranalysis.core.schemas does not declare for it (the
        readers check the columns they need); `engine`: as `write_npy`."""
        wrong = TABLES[name].undeclared(frame.columns) if name in TABLES else []
        if wrong:
            raise ValueError(f"{name}: columns {wrong} are not declared; declare them in erroranalysis.core.schemas")
        return self._write(name, files.parquet_writer(frame), ".parquet", engine)

    def write_npy(self, name: str, array, engine=None):
        """Write array `name`: a file in staging; for a run built for object storage whose later stages run on
        `engine`'s workers, the one shard of its folder there (`shards`), so that no worker needs this disk."""
        return self._write(name, files.npy_writer(array), ".npy", engine)

    def whole(self, name: str, suffix: str, engine=None):
        """Where artifact `name` is written whole (by this process or one worker): its file in staging, or, where
        `shards` would put it on object storage, the one shard of its folder there."""
        target = self.shards(name, engine)
        return target / shards.SHARD.format(start=0, suffix=suffix) if name in self.remote_shards else target

    def _write(self, name: str, fill, suffix: str, engine):
        target = self.whole(name, suffix, engine)
        if name not in self.remote_shards:
            return files.atomic_write(target, fill)
        shards.write_file(target, fill, digest=True)
        return target

    def written(self) -> list[str]:
        """The artifacts present in staging (temporary files of writes still open are not artifacts)."""
        return sorted(p.name for p in self.dir.iterdir() if not p.name.startswith("."))

    def plan(self) -> dict:
        """The commit record: what moves where, what goes, and each new file's digest."""
        for name, url in self.remote_shards.items():
            shards.seal(url, self.dir / name)
        written = self.written()
        files.sync_tree(self.dir)  # on disk before the manifest names them (the commit point)
        return {"staging": self.dir.name, "write": written, "manifest": self.manifest,
                "remove": [n for n in STAGE_ARTIFACTS[self.stage] if n not in written],
                "digests": {n: files.digest(self.dir / n) for n in written}}

    def discard(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
        for url in self.remote_shards.values():
            shards.remove(url)


FIX = "; nothing was changed: restore the manifest from a copy you trust or re-create the run."


def check_plan(run_path: Path, stage: str, plan) -> Path:
    """The staging folder of `plan` (stage `stage`'s commit record, as read from the manifest) once the plan is one
    this module could have written and every entry it names passes the confinement rule; else RunError (an
    OutsideError for a path that leads out), before anything is changed."""
    where = f"{Path(run_path) / 'manifest.json'}: stage {stage!r}'s commit record"
    owned = STAGE_ARTIFACTS.get(stage)
    if owned is None or not isinstance(plan, dict):
        raise RunError(f"{where} is not one erroranalysis writes (unknown stage or no plan){FIX}")
    names = {key: plan.get(key) for key in ("write", "remove")}
    for key, value in names.items():
        if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
            raise RunError(f"{where}: {key!r} is not a list of file names{FIX}")
    # first where each entry leads (a path out of the run is named as such), then whether the stage writes it
    staging = plan.get("staging")
    folder = confine.entry(confine.entry(run_path, STAGING, "staging folder"), staging, "staging folder")
    for key, value in names.items():
        confine.entries(run_path, value, f"{key} entry")
    confine.entries(folder, names["write"], "staged file")
    if "/" in staging:
        raise RunError(f"{where}: staging folder {staging!r} is not one folder of {STAGING}{FIX}")
    for key, value in names.items():
        stray = [n for n in value if n not in owned]
        if stray:
            raise RunError(f"{where}: {key!r} names {stray[0]!r}, which stage {stage!r} does not write (it writes "
                           f"{', '.join(owned)}){FIX}")
    settled = plan.get("manifest", {})
    if not isinstance(settled, dict) or not all(k in SETTLED and isinstance(v, dict) for k, v in settled.items()):
        raise RunError(f"{where}: 'manifest' sets fields a stage does not settle (only {', '.join(SETTLED)}){FIX}")
    digests, done = plan.get("digests"), plan.get("done")
    if (not isinstance(digests, dict) or set(digests) != set(names["write"])
            or not all(isinstance(d, dict) for d in digests.values()) or not isinstance(done, dict)
            or "finished" not in done):
        raise RunError(f"{where} lacks the digests or the outcome of its files{FIX}")
    return folder


def apply(run_path: Path, plan: dict) -> None:
    """Step 2 of the commit: move staged files into place, remove the stale ones. Safe to repeat. The plan has
    passed `check_plan`."""
    staging = Path(run_path) / STAGING / plan["staging"]
    for name in plan["write"]:
        source, target = staging / name, Path(run_path) / name
        if not source.exists():
            continue  # moved before an interruption
        if (target.is_dir() and not target.is_symlink()) or (source.is_dir() and target.exists()):
            aside = staging / f".old-{name}"  # a folder of shards replaces a file, or anything replaces a folder
            os.replace(target, aside)
            os.replace(source, target)
            if aside.is_dir():
                shutil.rmtree(aside, ignore_errors=True)
            else:
                aside.unlink(missing_ok=True)
        else:
            if source.is_dir() and (target.is_file() or target.is_symlink()):
                target.unlink()  # shards replace a single file (the stage ran in-process before); repeatable
            os.replace(source, target)
    for name in plan["remove"]:
        target = Path(run_path) / name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target, ignore_errors=True)
        else:
            target.unlink(missing_ok=True)
    files.sync_dir(run_path)  # the moves are on disk before the manifest records the stage done


def finish(run_path: Path, plan: dict) -> None:
    """Step 3's cleanup: the staging folder goes."""
    shutil.rmtree(Path(run_path) / STAGING / plan["staging"], ignore_errors=True)


def sweep(run_path: Path, stage: str, keep: set[str] = frozenset()) -> None:
    """Remove staging folders a stage left behind when it was interrupted before its commit."""
    root = confine.entry(run_path, STAGING, "staging folder")
    if root.is_dir():
        folders = [f for f in root.glob(f"{stage}-*") if f.name not in keep]
        confine.entries(root, [f.name for f in folders], "staging folder")
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)
