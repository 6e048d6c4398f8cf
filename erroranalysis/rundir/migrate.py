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

from erroranalysis import files
from erroranalysis.errors import RunError
from erroranalysis.rundir.artifacts import MANIFEST, METRICS, STAGE_ARTIFACTS
from erroranalysis.rundir.lock import RunLock
from erroranalysis.rundir.run import SCHEMA_VERSION

BACKUP = ".v1.bak"


def migrate_run(path: str | Path) -> dict:
    """Upgrade the run at `path` in place; return what changed. A run already current is left as it is."""
    path = Path(path)
    manifest_file = path / MANIFEST
    if not manifest_file.is_file():
        raise RunError(f"{path}: not a run directory (no {MANIFEST}); point at a folder made by 'erroranalysis run'.")
    manifest = _load(manifest_file)
    version = manifest.get("schema_version")
    if version == SCHEMA_VERSION:
        return {"run": str(path), "from": version, "to": version, "changed": []}
    if version != 1:
        raise RunError(f"{manifest_file}: schema_version {version!r} cannot be migrated (only 1 -> {SCHEMA_VERSION}).")
    with RunLock(path):
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
        files.write_json(manifest_file, upgrade_manifest(manifest, path))
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


def upgrade_manifest(manifest: dict, path: Path) -> dict:
    out = dict(manifest, schema_version=SCHEMA_VERSION)
    out.setdefault("command", None)
    generation = out.get("generation")
    if isinstance(generation, dict) and "checks" in generation:
        out["generation"] = _rename(generation, "checks", "output_checks")
    stages = {name: dict(entry) for name, entry in (out.get("stages") or {}).items()}
    for entry in stages.values():
        if entry.get("status") == "running":  # 0.1 kept no pid: a stage left running was interrupted
            entry["status"] = "interrupted"
            entry.setdefault("error", "left running by erroranalysis 0.1")
    out["stages"] = stages
    out["artifacts"] = _artifacts(path, stages)
    return out


def _artifacts(path: Path, stages: dict) -> dict:
    """Each artifact present, attributed to the stage that wrote it last (by the stages' finish times)."""
    found = {}
    for stage, names in STAGE_ARTIFACTS.items():
        entry = stages.get(stage)
        if not entry or entry.get("status") != "done":
            continue
        for name in names:
            file = path / name
            if not file.exists() or (name in found and found[name]["written"] >= entry.get("finished", "")):
                continue
            found[name] = {"stage": stage, **files.digest(file), "written": entry.get("finished", "")}
    return found


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
