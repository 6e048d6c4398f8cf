"""Where a committed artifact is, and whether it can be trusted: the manifest's last commit of it, the stage state
that makes it usable, and its size and sha256 against what that commit recorded. `readers` builds every typed
reader on `artifact_path`; nothing else opens a run's files."""

from __future__ import annotations

import os
from pathlib import Path

from erroranalysis.core import files
from erroranalysis.core.errors import RunError
from erroranalysis.rundir.artifacts import MANIFEST, SOURCE_STAGES, STAGE_ARTIFACTS, owner
from erroranalysis.rundir.confine import check_allowed, check_tree

VERIFY_LIMIT = 256 << 20  # sha256 checked for artifacts up to this size (sizes are always checked)


_VERIFIED: dict[tuple, str] = {}  # (realpath, mtime_ns, size) -> sha256, so the app does not re-hash on every rerun


def artifact_path(run, name: str, required: bool = True, *, allowed_roots=None) -> Path | None:
    """The file of artifact `name` as its stage last committed it, checked against the recorded size and sha256.

    An artifact never committed is refused with the reason (its stage was not run, is running, was interrupted or
    failed, or an input stage is not done) and the command to run. A later attempt of the stage that is running,
    failed or was interrupted leaves the committed artifacts usable (they are a whole, consistent set); only a
    stage caught while moving its files into place (`committing`) makes them unusable until it is finished. When
    the stage is done but did not write `name`: None if not `required` (probabilities of a run without them),
    else a RunError.

    The run's manifest and the file are opened only inside `allowed_roots` (default: those of `confined`, if
    any): a symlink that leads out of them is refused (OutsideError) before anything is read."""
    check_allowed(run.path / MANIFEST, allowed_roots)
    manifest = run.manifest
    entry = manifest.get("artifacts", {}).get(name)
    if entry is None:
        stage = _expected_stage(run, manifest, name)
        reason = run.explain(stage, manifest)
        if reason:
            raise NotCommitted(f"{run.path}: {name} is not available: {reason}")
        if required and _pruned(run, manifest, name):
            raise NotCommitted(f"{run.path}: {name} was removed by 'erroranalysis timeline --prune' (an old step "
                               f"of a training run); run: {run.resume_command(stage)}")
        if required:
            raise NotCommitted(f"{run.path}: stage {stage!r} wrote no {name}; run: {run.resume_command(stage)}")
        return None
    stage = entry["stage"]
    state = run.state(stage, manifest) or {}
    if state.get("status") == "committing" or state.get("recorded_status") == "committing":
        raise NotCommitted(f"{run.path}: {name} is not available: stage {stage!r} was stopped while saving its files; "
                       f"run: {run.resume_command(stage)}")
    file = run.path / name
    check_tree(file, allowed_roots)
    _verify(run, file, entry, stage)
    return file


def usable(run, name: str) -> bool:
    """Whether artifact `name` is committed (damage is not checked: readers report it)."""
    try:
        return artifact_path(run, name, required=False) is not None
    except RunError:
        return False


def _expected_stage(run, manifest: dict, name: str) -> str:
    stages = owner(name)
    if set(stages) & set(SOURCE_STAGES):
        return run.source_stage(manifest)
    ran = [s for s in stages if s in manifest.get("stages", {})]
    return ran[0] if ran else stages[0]


def _pruned(run, manifest: dict, name: str) -> bool:
    return name in STAGE_ARTIFACTS["prune"] and (run.state("prune", manifest) or {}).get("status") == "done"


def _verify(run, file: Path, entry: dict, stage: str) -> None:
    command = run.resume_command(stage)
    if not file.exists():
        raise RunError(f"{file}: missing, though stage {stage!r} recorded it; run: {command}")
    size = files.size_of(file)
    if "bytes" in entry and size != entry["bytes"]:
        raise RunError(f"{file}: {size} bytes, but stage {stage!r} wrote {entry['bytes']} (damaged or replaced "
                       f"since); run: {command}")
    if "sha256" not in entry or size > VERIFY_LIMIT:
        return
    key = (os.path.realpath(file), _mtime(file), size)
    sha = _VERIFIED.get(key) or files.digest(file)["sha256"]
    if sha != entry["sha256"]:
        raise RunError(f"{file}: does not match the checksum stage {stage!r} recorded (damaged or changed since); "
                       f"run: {command}")
    _VERIFIED[key] = sha


def _mtime(file: Path) -> int:
    if file.is_dir():
        return max((p.stat().st_mtime_ns for p in file.rglob("*")), default=file.stat().st_mtime_ns)
    return file.stat().st_mtime_ns


class NotCommitted(RunError):
    """The artifact has no commit yet (its stage was not run, is running, was interrupted or failed first)."""


def optional_reader(read):
    """Give a reader `optional=`: None instead of a RunError when its artifact was never committed. A committed
    artifact that is damaged is still an error: a page must say so, not show nothing."""
    def wrapper(run, *args, optional: bool = False, **kwargs):
        try:
            return read(run, *args, **kwargs)
        except NotCommitted:
            if optional:
                return None
            raise

    wrapper.__name__, wrapper.__doc__ = read.__name__, read.__doc__
    return wrapper
