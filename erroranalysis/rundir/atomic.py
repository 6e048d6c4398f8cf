"""Atomic writes: a temporary file in the same folder, then `os.replace`, so a reader never sees half a file.
"""

from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np


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
