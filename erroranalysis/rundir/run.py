"""The run directory: the contract between stages, the CLI, the UI and users' own scripts.

Every artifact is written atomically (temporary file, then `os.replace`), so a reader never sees half a file.
The manifest records each stage's status; a stage that raised is recorded as failed, never left looking done.
See docs/run-directory.md for the format.
"""

from __future__ import annotations

import datetime as _dt
import json
import shutil
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from erroranalysis import __version__
from erroranalysis.errors import RunError
from erroranalysis.rundir.artifacts import HIDDEN, MANIFEST, METRICS, PREDICTIONS, PROBS
from erroranalysis.rundir.atomic import write_json

SCHEMA_VERSION = 1


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


class Run:
    """A run directory. `Run.create` starts one, `Run.open` reads an existing one."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    # -- creation and opening -------------------------------------------------------------------------------

    @classmethod
    def create(cls, path: str | Path, *, overwrite: bool = False, **manifest: Any) -> "Run":
        path = Path(path)
        if path.exists() and not path.is_dir():
            raise RunError(f"{path}: exists and is not a directory; choose another --out.")
        if path.is_dir() and any(path.iterdir()):
            if not (path / MANIFEST).exists():
                raise RunError(f"{path}: directory is not empty and is not a run; choose another --out.")
            if not overwrite:
                raise RunError(f"{path}: a run already exists here; pass --overwrite to replace it.")
            shutil.rmtree(path)
        path.mkdir(parents=True, exist_ok=True)
        run = cls(path)
        base = {
            "schema_version": SCHEMA_VERSION,
            "tool": {"name": "erroranalysis", "version": __version__},
            "created": now_iso(),
            "stages": {},
            "versions": package_versions(),
        }
        base.update(manifest)
        write_json(path / MANIFEST, base)
        return run

    @classmethod
    def open(cls, path: str | Path) -> "Run":
        path = Path(path)
        if not path.is_dir():
            raise RunError(f"{path}: no such run directory; create one with 'erroranalysis run' or 'analyze'.")
        if not (path / MANIFEST).is_file():
            raise RunError(f"{path}: not a run directory (no {MANIFEST}); point at a folder made by 'erroranalysis run'.")
        run = cls(path)
        run.manifest  # validate early
        return run

    # -- manifest -------------------------------------------------------------------------------------------

    @property
    def manifest(self) -> dict:
        file = self.path / MANIFEST
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise RunError(f"{file}: unreadable manifest ({exc}); re-create the run.") from None
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise RunError(f"{file}: schema_version {version!r} is not supported (expected {SCHEMA_VERSION}).")
        return data

    def update_manifest(self, **fields: Any) -> dict:
        data = self.manifest
        data.update(fields)
        write_json(self.path / MANIFEST, data)
        return data

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def labels(self) -> list[str]:
        return list(self.manifest.get("labels", []))

    @property
    def task(self) -> str:
        return self.manifest.get("task", "classification")

    # -- stages ---------------------------------------------------------------------------------------------

    def stage_status(self, name: str) -> str | None:
        return self.manifest.get("stages", {}).get(name, {}).get("status")

    def require(self, name: str, hint: str = "") -> None:
        status = self.stage_status(name)
        if status != "done":
            state = "was not run" if status is None else f"is {status}"
            raise RunError(f"{self.path}: stage {name!r} {state}{'; ' + hint if hint else ''}.")

    @contextmanager
    def stage(self, name: str, params: dict | None = None) -> Iterator[dict]:
        """Record a stage: running, then done with its seconds, or failed with the error.

        Yields a dict the stage may fill with extra facts to keep in its manifest entry.
        """
        extra: dict = {}
        self._set_stage(name, {"status": "running", "params": params or {}, "started": now_iso()})
        start = time.perf_counter()
        try:
            yield extra
        except BaseException as exc:
            message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            self._set_stage(name, {"status": "failed", "error": message,
                                   "seconds": round(time.perf_counter() - start, 3)})
            raise
        self._set_stage(name, {"status": "done", "seconds": round(time.perf_counter() - start, 3),
                               "finished": now_iso(), **extra})

    def _set_stage(self, name: str, fields: dict) -> None:
        data = self.manifest
        entry = data.setdefault("stages", {}).setdefault(name, {})
        entry.pop("error", None)
        entry.update(fields)
        write_json(self.path / MANIFEST, data)

    # -- artifacts ------------------------------------------------------------------------------------------

    def file(self, name: str) -> Path:
        return self.path / name

    def has(self, name: str) -> bool:
        return (self.path / name).is_file()

    def predictions(self, columns: list[str] | None = None):
        import pandas as pd

        file = self._existing(PREDICTIONS, "infer")
        try:
            return pd.read_parquet(file, columns=columns)
        except Exception as exc:  # pyarrow raises several types for a damaged file
            raise RunError(f"{file}: unreadable ({str(exc).splitlines()[0]}); re-run the stage that writes it.") from None

    def probs(self) -> np.ndarray | None:
        if not self.has(PROBS):
            return None
        return self._load_npy(PROBS)

    def hidden_states(self) -> np.ndarray | None:
        return self._load_npy(HIDDEN) if self.has(HIDDEN) else None

    def metrics(self) -> dict:
        file = self._existing(METRICS, "metrics")
        try:
            return json.loads(file.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise RunError(f"{file}: unreadable ({exc}); run 'erroranalysis metrics {self.path}'.") from None

    def read_parquet(self, name: str, stage: str):
        import pandas as pd

        file = self._existing(name, stage)
        try:
            return pd.read_parquet(file)
        except Exception as exc:
            raise RunError(f"{file}: unreadable ({str(exc).splitlines()[0]}); re-run the {stage!r} stage.") from None

    def _load_npy(self, name: str) -> np.ndarray:
        file = self.path / name
        try:
            return np.load(file, mmap_mode="r")
        except (OSError, ValueError) as exc:
            raise RunError(f"{file}: unreadable ({exc}); re-run the stage that writes it.") from None

    def _existing(self, name: str, stage: str) -> Path:
        file = self.path / name
        if not file.is_file():
            raise RunError(f"{self.path}: missing {name}; run the {stage!r} stage first.")
        return file


def package_versions() -> dict[str, str]:
    """Versions of the packages that decide results, without importing them."""
    from importlib import metadata

    names = ["numpy", "pandas", "scikit-learn", "torch", "transformers", "umap-learn", "hdbscan"]
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return versions
