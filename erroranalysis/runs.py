"""The run directory: the contract between stages, the CLI, the UI and users' own scripts.

Every artifact is written atomically (temporary file, then `os.replace`), so a reader never sees half a file.
The manifest records each stage's status; a stage that raised is recorded as failed, never left looking done.
See docs/run-directory.md for the format.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from erroranalysis import __version__
from erroranalysis.errors import RunError

SCHEMA_VERSION = 1

MANIFEST = "manifest.json"
PREDICTIONS = "predictions.parquet"
PROBS = "probs.npy"
HIDDEN = "hidden_states.npy"
METRICS = "metrics.json"
EMBEDDINGS = "embeddings.npy"
EMBEDDINGS_META = "embeddings.json"
CLUSTERS = "clusters.parquet"
ASSIGNMENTS = "assignments.parquet"
SLICES = "slices.parquet"
SLICE_MEMBERS = "slice_members.parquet"

# Columns predictions.parquet always has; any other column is eval-set metadata.
CORE_COLUMNS = ("example_id", "text", "label", "pred", "correct", "confidence", "loss", "n_tokens", "truncated")


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Call `write(tmp_path)` then move the result onto `path` in one step."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json(path: str | Path, obj: Any) -> Path:
    text = json.dumps(obj, indent=2, default=_json_default, allow_nan=False)
    return atomic_write(path, lambda p: p.write_text(text + "\n", encoding="utf-8"))


def write_parquet(path: str | Path, df) -> Path:
    return atomic_write(path, lambda p: df.to_parquet(p, index=False))


def write_npy(path: str | Path, array: np.ndarray) -> Path:
    def _save(p: Path) -> None:
        with open(p, "wb") as f:
            np.save(f, array)

    return atomic_write(path, _save)


@contextmanager
def atomic_files(*paths: str | Path) -> Iterator[list[Path]]:
    """Temporary paths for several files written together; all are moved into place only if the block succeeds."""
    finals = [Path(p) for p in paths]
    temps = []
    for final in finals:
        final.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent)
        os.close(fd)
        temps.append(Path(tmp))
    try:
        yield temps
        for tmp, final in zip(temps, finals):
            if tmp.exists():
                os.replace(tmp, final)
    finally:
        for tmp in temps:
            tmp.unlink(missing_ok=True)


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


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
