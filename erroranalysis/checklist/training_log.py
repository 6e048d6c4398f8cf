"""Read a training log: Hugging Face `trainer_state.json`, TensorBoard event files, or a CSV/JSONL log, into one
`TrainingLog` (a few named step/value series). `load_training_log` is the one dispatch over formats.
"""

from __future__ import annotations

import csv
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import numpy as np

from erroranalysis.core.errors import DataError, preview, where
from erroranalysis.sources.table import json_lines

# Signal name -> field names, columns or TensorBoard tags that hold it (compared in lower case).
ALIASES = {
    "loss": ("loss", "train_loss", "training_loss", "train/loss", "loss/train"),
    "eval_loss": ("eval_loss", "val_loss", "validation_loss", "eval/loss", "val/loss", "loss/eval", "loss/val"),
    "grad_norm": ("grad_norm", "gradient_norm", "train/grad_norm"),
    "learning_rate": ("learning_rate", "lr", "train/learning_rate", "train/lr"),
}
STEP_FIELDS = ("step", "global_step")
SIGNAL_NAMES = {"loss": "training loss", "eval_loss": "validation loss", "grad_norm": "grad norm",
                "learning_rate": "learning rate"}


@dataclass(frozen=True)
class Signal:
    """One logged quantity: values in step order (NaN and inf kept, they are findings)."""

    steps: np.ndarray
    values: np.ndarray

    def finite(self) -> "Signal":
        ok = np.isfinite(self.values)
        return Signal(self.steps[ok], self.values[ok])

    def __len__(self) -> int:
        return len(self.steps)


@dataclass(frozen=True)
class TrainingLog:
    path: str
    format: str  # "trainer_state", "tensorboard", "csv" or "jsonl"
    signals: dict[str, Signal] = field(default_factory=dict)

    def get(self, name: str) -> Signal | None:
        signal = self.signals.get(name)
        return signal if signal is not None and len(signal) else None


def load_training_log(path: str | Path) -> TrainingLog:
    """Read a log file, a checkpoint folder (its trainer_state.json or its latest checkpoint-*/ one) or a
    TensorBoard run folder."""
    file, kind = find_log(path)
    reader = {"trainer_state": read_trainer_state, "tensorboard": read_tensorboard,
              "csv": read_csv_log, "jsonl": read_jsonl_log}[kind]
    return reader(file)


def find_log(path: str | Path) -> tuple[Path, str]:
    """The file (or TensorBoard folder) to read under `path`, and its format."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: no such file or folder; pass a training log or a checkpoint folder.")
    if path.is_dir():
        return _find_in_folder(path)
    name = path.name.lower()
    if "tfevents" in name:
        return path, "tensorboard"
    if name.endswith(".csv"):
        return path, "csv"
    if name.endswith((".jsonl", ".ndjson")):
        return path, "jsonl"
    if name.endswith(".json"):
        return path, "trainer_state"
    raise DataError(f"{path}: unknown log format; expected trainer_state.json, TensorBoard event files, "
                    "a .csv or a .jsonl log.")


def _find_in_folder(folder: Path) -> tuple[Path, str]:
    if (folder / "trainer_state.json").is_file():
        return folder / "trainer_state.json", "trainer_state"
    checkpoints = [p for p in folder.glob("checkpoint-*/trainer_state.json") if _checkpoint_step(p) is not None]
    if checkpoints:  # the latest checkpoint's log_history holds the earlier ones' too
        return max(checkpoints, key=_checkpoint_step), "trainer_state"
    event_dirs = sorted({p.parent for p in folder.rglob("*tfevents*") if p.is_file()})
    if len(event_dirs) == 1:
        return event_dirs[0], "tensorboard"
    if len(event_dirs) > 1:
        raise DataError(f"{folder}: TensorBoard events of {len(event_dirs)} runs found "
                        f"({preview(str(d.relative_to(folder)) for d in event_dirs)}); pass one run's folder.")
    raise DataError(f"{folder}: no trainer_state.json, checkpoint-*/trainer_state.json or TensorBoard event "
                    "files found; pass the log file itself.")


def _checkpoint_step(file: Path) -> int | None:
    match = re.fullmatch(r"checkpoint-(\d+)", file.parent.name)
    return int(match.group(1)) if match else None


def read_trainer_state(path: str | Path) -> TrainingLog:
    """A Hugging Face Trainer's `trainer_state.json`: its `log_history` entries."""
    path = Path(path)
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: unreadable ({exc}).") from None
    except json.JSONDecodeError as exc:
        raise DataError(f"{where(path, exc.lineno)}: not valid JSON ({exc.msg}).") from None
    if not isinstance(state, dict) or "log_history" not in state:
        raise DataError(f"{path}: no 'log_history' field; expected a Hugging Face trainer_state.json.")
    history = state["log_history"]
    if not isinstance(history, list):
        raise DataError(f"{path}: field 'log_history' is not a list; expected a list of log entries.")
    if not history:
        raise DataError(f"{path}: empty log: 'log_history' has no entries; set logging_steps so the Trainer logs.")
    records = [(f"log_history[{i}]", entry) for i, entry in enumerate(history)]
    return TrainingLog(str(path), "trainer_state", _signals_from_records(path, records))


def read_csv_log(path: str | Path) -> TrainingLog:
    """A CSV log with a `step` column and any of loss, eval_loss, grad_norm, learning_rate (or aliases).

    An empty cell means "not logged at this step"; `nan` and `inf` are read as values."""
    path = Path(path)
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            records = [(f"line {reader.line_num}", row) for row in reader]
            columns = reader.fieldnames
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise DataError(f"{path}: unreadable as CSV ({exc}).") from None
    if not columns:
        raise DataError(f"{path}: empty log: the file is empty; expected a header with 'step' and 'loss'.")
    if not records:
        raise DataError(f"{path}: empty log: only a header, no rows.")
    return TrainingLog(str(path), "csv", _signals_from_records(path, records))


def read_jsonl_log(path: str | Path) -> TrainingLog:
    """A JSON Lines log: one object per line with `step` and any of the logged quantities."""
    path = Path(path)
    try:
        lines = json_lines(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: unreadable ({exc}).") from None
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{where(path, number)}: not valid JSON ({exc.msg}).") from None
        if not isinstance(entry, dict):
            raise DataError(f"{where(path, number)}: expected a JSON object, got {type(entry).__name__}.")
        records.append((f"line {number}", entry))
    if not records:
        raise DataError(f"{path}: empty log: no entries.")
    return TrainingLog(str(path), "jsonl", _signals_from_records(path, records))


def read_tensorboard(path: str | Path) -> TrainingLog:
    """TensorBoard scalars from an event file or a run folder, through tensorboard's EventAccumulator."""
    path = Path(path)
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError:
        raise DataError(f"{path}: reading TensorBoard event files needs the tensorboard package; "
                        "run 'pip install tensorboard' or export the log as CSV.") from None
    accumulator = EventAccumulator(str(path), size_guidance={"scalars": 0})
    try:
        accumulator.Reload()
    except Exception as exc:  # tensorboard raises several types for damaged files
        raise DataError(f"{path}: unreadable TensorBoard events ({str(exc).splitlines()[0]}).") from None
    tags = accumulator.Tags().get("scalars", [])
    if not tags:
        raise DataError(f"{path}: empty log: no scalar summaries in the event files.")
    by_name = _match_aliases(tags)
    _require_loss(path, by_name, tags, "tag")
    signals = {}
    for name, tag in by_name.items():
        events = accumulator.Scalars(tag)
        signals[name] = _signal([e.step for e in events], [e.value for e in events])
    return TrainingLog(str(path), "tensorboard", signals)


def _match_aliases(fields: Iterable[str]) -> dict[str, str]:
    """Signal name -> the first field that holds it, by the order of ALIASES."""
    lower = {str(f).lower(): f for f in fields}
    found = {}
    for name, aliases in ALIASES.items():
        hit = next((lower[a] for a in aliases if a in lower), None)
        if hit is not None:
            found[name] = hit
    return found


def _require_loss(path, by_name: dict, fields, kind: str) -> None:
    if "loss" not in by_name:
        raise DataError(f"{path}: no training loss {kind} ('loss' or 'train_loss'; {kind}s found: "
                        f"{preview(sorted(map(str, fields)), 8)}); log the training loss.")


def _signals_from_records(path: Path, records: list[tuple[str, dict]]) -> dict[str, Signal]:
    fields = sorted({str(k) for _, entry in records if isinstance(entry, dict) for k in entry})
    step_field = next((f for f in fields if f.lower() in STEP_FIELDS), None)
    if step_field is None:
        raise DataError(f"{path}: no 'step' field (fields found: {preview(fields, 8)}); "
                        "log the global step with every entry.")
    by_name = _match_aliases(fields)
    _require_loss(path, by_name, fields, "field")
    points: dict[str, tuple[list, list]] = {name: ([], []) for name in by_name}
    for location, entry in records:
        if not isinstance(entry, dict):
            raise DataError(f"{path}, {location}: expected an object with 'step', got {type(entry).__name__}.")
        logged = {name: entry.get(key) for name, key in by_name.items() if not _blank(entry.get(key))}
        if not logged:
            continue
        step = _number(path, location, step_field, entry.get(step_field))
        if step is None or not math.isfinite(step) or step != int(step):
            raise DataError(f"{path}, {location}: field {step_field!r} is {entry.get(step_field)!r}; "
                            "expected a whole step number.")
        for name, raw in logged.items():
            points[name][0].append(int(step))
            points[name][1].append(_number(path, location, by_name[name], raw))
    return {name: _signal(steps, values) for name, (steps, values) in points.items() if steps}


def _blank(value) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _number(path, location: str, key: str, value) -> float | None:
    if _blank(value):
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise DataError(f"{path}, {location}: field {key!r} is {value!r}; expected a number.")
    try:
        return float(value)  # also reads 'nan' and 'inf', which are findings, not errors
    except ValueError:
        raise DataError(f"{path}, {location}: field {key!r} is {value!r}; expected a number.") from None


def _signal(steps, values) -> Signal:
    steps = np.asarray(steps, dtype=np.int64)
    order = np.argsort(steps, kind="stable")
    return Signal(steps[order], np.asarray(values, dtype=np.float64)[order])
