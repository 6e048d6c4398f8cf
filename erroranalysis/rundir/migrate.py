"""`erroranalysis migrate RUN`: upgrade a run made by erroranalysis 0.1 (schema_version 1) to the current schema.

Version 2 records which stage wrote each artifact, with its sha256 and size (`artifacts`), and renames two things
that had a double meaning: metrics.json's `per_slice` (metrics by metadata column, rows keyed `slice`) is
`by_metadata` (rows keyed `value`), and a generation run's output checks (`checks` in metrics.json and the
manifest) are `output_checks`. The files that change are copied to `<name>.v1.bak` first; every new file is
written aside and moved into place, the manifest last, so a migration that is stopped can simply be run again.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from erroranalysis.core import files
from erroranalysis.core.errors import RunError
from erroranalysis.rundir import confine, formats
from erroranalysis.rundir.artifacts import MANIFEST, METRICS, STAGE_ARTIFACTS
from erroranalysis.rundir.lock import RunLock
from erroranalysis.rundir.run import SCHEMA_VERSION

BACKUP = ".v1.bak"


def migrate_run(path: str | Path) -> dict:
    """Upgrade the run at `path` in place; return what changed. A run already current is left as it is.

    Everything is checked before anything is written: every file it will record passes the confinement rule (no
    symlink: a symlinked doctor.md is not checksummed as the run's) and reads as its format (a damaged Parquet is
    refused, not recorded with a fresh checksum that would make it look whole)."""
    path = Path(path)
    manifest_file = path / MANIFEST
    if not manifest_file.is_file():
        raise RunError(f"{path}: not a run directory (no {MANIFEST}); point at a folder made by 'erroranalysis run'.")
    confine.entries(path, [MANIFEST, MANIFEST + BACKUP, METRICS, METRICS + BACKUP], "entry")
    manifest = _load(manifest_file)
    version = manifest.get("schema_version")
    if version == SCHEMA_VERSION:
        return {"run": str(path), "from": version, "to": version, "changed": []}
    if version != 1:
        raise RunError(f"{manifest_file}: schema_version {version!r} cannot be migrated (only 1 -> {SCHEMA_VERSION}).")
    with RunLock(path):
        present = _present(path, _stages(manifest))
        changed = []
        metrics_file = path / METRICS
        if metrics_file.is_file():
            metrics = _load(metrics_file)
            upgraded = upgrade_metrics(metrics)
            if upgraded != metrics:
                _backup(metrics_file)
                files.write_json(metrics_file, upgraded)
                changed.append(METRICS)
        _backup(manifest_file)
        files.write_json(manifest_file, upgrade_manifest(manifest, path, present))
        changed.append(MANIFEST)
    return {"run": str(path), "from": 1, "to": SCHEMA_VERSION, "changed": changed,
            "backups": [name + BACKUP for name in changed]}


def upgrade_metrics(metrics: dict) -> dict:
    out = dict(metrics)
    if "per_slice" in out:
        out["by_metadata"] = {column: [_rename(row, "slice", "value") for row in rows]
                              for column, rows in (out.pop("per_slice") or {}).items()}
    if "checks" in out and "output_checks" not in out:
        out["output_checks"] = out.pop("checks")
    return out


def upgrade_manifest(manifest: dict, path: Path, present: dict[str, str] | None = None) -> dict:
    """The manifest at schema 2; `present` ({artifact: stage}, from `_present`) names the files to record."""
    out = dict(manifest, schema_version=SCHEMA_VERSION)
    out.setdefault("command", None)
    generation = out.get("generation")
    if isinstance(generation, dict) and "checks" in generation:
        out["generation"] = _rename(generation, "checks", "output_checks")
    stages = _stages(out)
    for entry in stages.values():
        if entry.get("status") == "running":  # 0.1 kept no pid: a stage left running was interrupted
            entry["status"] = "interrupted"
            entry.setdefault("error", "left running by erroranalysis 0.1")
    out["stages"] = stages
    if present is None:
        present = _present(path, stages)
    out["artifacts"] = {name: {"stage": stage, **files.digest(path / name),
                               "written": stages[stage].get("finished", "")} for name, stage in present.items()}
    return out


def _stages(manifest: dict) -> dict:
    stages = manifest.get("stages") or {}
    if not isinstance(stages, dict) or not all(isinstance(e, dict) for e in stages.values()):
        raise RunError(f"{MANIFEST}: 'stages' is not an object of stage entries; restore it from a backup.")
    return {name: dict(entry) for name, entry in stages.items()}


def _present(path: Path, stages: dict) -> dict[str, str]:
    """{artifact: the stage that wrote it last (by the stages' finish times)} for each artifact present, each
    checked by the confinement rule and read as its format first (RunError naming the file when it is not)."""
    found: dict[str, str] = {}
    for stage, names in STAGE_ARTIFACTS.items():
        entry = stages.get(stage)
        if not entry or entry.get("status") != "done":
            continue
        for name in names:
            file = confine.entry(path, name, "artifact")
            if not file.exists():
                continue
            if name in found and stages[found[name]].get("finished", "") >= entry.get("finished", ""):
                continue
            found[name] = stage
    for name in found:
        _verify(path, name)
    return found


def _verify(path: Path, name: str) -> None:
    """Read artifact `name` whole in its format: a file that does not read is not recorded as good."""
    file = path / name
    if file.is_dir():
        inside = [p for p in file.rglob("*")]
        bad = next((p for p in inside if p.is_symlink()), None)
        if bad is not None:
            confine.entry(path, bad.relative_to(path).as_posix(), "artifact")
    try:
        if name.endswith(".parquet"):
            formats.parquet(file)
        elif name.endswith(".npy"):
            formats.npy(file)
        elif name.endswith(".json"):
            formats.json_doc(file)
        else:
            file.read_text(encoding="utf-8")
    except (RunError, OSError, UnicodeDecodeError) as exc:
        reason = str(exc).split(": ", 1)[-1].split(";")[0] if isinstance(exc, RunError) else type(exc).__name__
        raise RunError(f"{file}: {reason}, so the run was not migrated (nothing was changed); restore that file "
                       f"from a copy, or delete it and migrate again (then re-run its stage).") from None


def _rename(row: dict, old: str, new: str) -> dict:
    return {(new if k == old else k): v for k, v in row.items()}


def _backup(file: Path) -> None:
    backup = file.with_name(file.name + BACKUP)
    if not backup.exists():  # a second run of an interrupted migration keeps the first, original copy
        shutil.copy2(file, backup)


def _load(file: Path) -> dict:
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RunError(f"{file}: unreadable JSON ({type(exc).__name__}); restore it from a backup.") from None
    if not isinstance(data, dict):
        raise RunError(f"{file}: not a JSON object; restore it from a backup.")
    return data
