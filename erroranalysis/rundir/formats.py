"""Reading one artifact file (or folder of shards) in its format: Parquet, JSON, NumPy; every failure is a
one-line RunError that names the file and says to run its stage again, never a library traceback.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from erroranalysis.core import shards, storage
from erroranalysis.core.errors import RunError, UserError, preview
from erroranalysis.rundir.confine import (  # noqa: F401  (readers.confined & co. are the readers' public API)
    OutsideError,
    check_allowed,
    check_tree,
    confined,
    real_roots,
)


def parquet(file: Path, columns=None):
    """A Parquet artifact (a file or a folder of shards). Arrow's messages can quote cell contents (example
    texts), so only the kind of failure is reported."""
    import pandas as pd

    columns = list(columns) if columns is not None else None
    try:
        if shards.pointer(file):  # shards on object storage, in row order
            return pd.concat([storage.read_parquet(p, columns=columns).to_pandas()
                              for p in shards.parts(file, ".parquet")], ignore_index=True)
        return pd.read_parquet(file, columns=columns)
    except (OSError, ValueError, ArithmeticError, RuntimeError, KeyError) as exc:
        kind = "not a Parquet file" if "magic" in str(exc).lower() else f"damaged ({type(exc).__name__})"
        raise RunError(f"{file}: unreadable, {kind}; run the stage that writes it again.") from None
    except UserError:  # a pointer refused, an object unreachable: already one line
        raise
    except Exception as exc:  # pyarrow raises types of its own
        raise RunError(f"{file}: unreadable, damaged ({type(exc).__name__}); run the stage that writes it "
                       "again.") from None


def json_doc(file: Path):
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RunError(f"{file}: unreadable JSON ({type(exc).__name__}); run the stage that writes it again.") from None


def npy(file: Path) -> np.ndarray:
    """An array artifact: one .npy file, or a folder of `part-*.npy` shards in row order."""
    try:
        if file.is_dir():
            parts = shards.parts(file, ".npy")
            return np.concatenate([shards.load_npy(p) for p in parts]) if parts else np.zeros((0, 0), np.float32)
        return np.load(file, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise RunError(f"{file}: unreadable array ({type(exc).__name__}); run the stage that writes it "
                       "again.") from None


def require_columns(file: Path, frame, columns) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise RunError(f"{file}: missing column(s) {preview(missing)}; run the stage that writes it again.")


def parquet_columns(file: Path) -> set[str]:
    try:
        return set(shards.open_parquet(shards.parts(file, ".parquet")[0]).schema_arrow.names)
    except UserError:
        raise
    except Exception as exc:
        raise RunError(f"{file}: unreadable, damaged ({type(exc).__name__}); run the stage that writes it "
                       "again.") from None
