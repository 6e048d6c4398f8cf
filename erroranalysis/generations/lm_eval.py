"""lm-evaluation-harness `--log_samples` files (`samples_<task>_<time>.jsonl`), as a generations table.

Each line is one document of a `generate_until` task: `doc_id`, `doc` (the dataset row), `target`, `arguments`
(the prompt: `{"gen_args_0": {"arg_0": prompt, "arg_1": {...}}}`, or `[[prompt, {...}]]` from older versions),
`resps` (raw outputs), `filtered_resps` (after the task's filters), `filter`, `metrics` (the names) and one field
per metric. The table has `example_id` (the doc id; `doc_id:filter` when a file holds several filters), `prompt`,
`output` (the filtered response), `raw_output`, `reference` (the target), `task`, `filter`, each metric, and the
document's short scalar fields as `doc_<name>`. The first metric is the judge (`frame.attrs["judge"]`): the
harness' own judgement, which the judge check uses unless `--score-column` names another.

Loglikelihood tasks (multiple choice, perplexity) generate no text: their files are refused with what was found.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

from erroranalysis.core.errors import DataError, where
from erroranalysis.sources.table import jsonl_records

DOC_TEXT_LIMIT = 64  # a document's string fields up to this length are kept as metadata (categories, not passages)


def read_samples(path: Path, *, encoding: str = "utf-8") -> pd.DataFrame:
    """The samples file as a table with `_line` (the file's line numbers)."""
    task = task_name(path)
    rows = [_row(record, path, number, task) for number, record in jsonl_records(path, encoding)]
    if not rows:
        raise DataError(f"{path}: no samples; write them with lm_eval --log_samples --output_path DIR.")
    frame = pd.DataFrame.from_records(rows)
    judges = frame.pop("_judge").dropna()
    if len(judges):
        frame.attrs["judge"] = str(judges.iloc[0])
    ids = frame["example_id"]
    if ids.duplicated().any():
        frame["example_id"] = ids + ":" + frame["filter"].astype(str)
    return frame


def task_name(path: Path) -> str | None:
    """The task of `samples_<task>_<time>.jsonl`, as lm-eval names its files."""
    found = re.match(r"samples_(.+)_\d{4}-\d{2}-\d{2}T[\d\-.]+$", path.stem)
    return found.group(1) if found else None


def _row(record, path: Path, number: int, task: str | None) -> dict:
    if not isinstance(record, dict) or "doc_id" not in record or "filtered_resps" not in record:
        found = sorted(record)[:8] if isinstance(record, dict) else type(record).__name__
        raise DataError(f"{where(path, number)}: not an lm-eval sample (expected doc_id, doc, target, arguments, "
                        f"resps, filtered_resps; found {found}).")
    output = _output(record.get("filtered_resps"), path, number)
    raw = _output(record.get("resps"), path, number, nested=True)
    row = {"example_id": str(record["doc_id"]), "prompt": _prompt(record.get("arguments"), path, number),
           "output": output, "raw_output": raw, "reference": _text(record.get("target")), "task": task,
           "filter": record.get("filter"), "_line": number}
    metrics = [m for m in record.get("metrics") or [] if m in record]
    for name in metrics:
        row[name] = _number(record[name])
    row["_judge"] = metrics[0] if metrics else None
    for key, value in (record.get("doc") or {}).items():
        if isinstance(value, (bool, int, float)) or (isinstance(value, str) and len(value) <= DOC_TEXT_LIMIT):
            row[f"doc_{key}"] = value
    return row


def _prompt(arguments, path: Path, number: int) -> str:
    if isinstance(arguments, dict) and arguments:  # lm-eval >= 0.4.3: {"gen_args_0": {"arg_0": prompt, ...}}
        first = arguments.get("gen_args_0") or next(iter(arguments.values()))
        value = first.get("arg_0") if isinstance(first, dict) else None
    elif isinstance(arguments, list) and arguments and isinstance(arguments[0], (list, tuple)):
        value = arguments[0][0] if arguments[0] else None
    else:
        value = None
    if not isinstance(value, str):
        raise DataError(f"{where(path, number, 'arguments')}: no prompt (expected gen_args_0.arg_0 to be text).")
    return value


def _output(responses, path: Path, number: int, nested: bool = False) -> str:
    value = responses
    for _ in range(2 if nested else 1):
        if isinstance(value, list) and value:
            value = value[0]
    if not isinstance(value, str):
        column = "resps" if nested else "filtered_resps"
        raise DataError(f"{where(path, number, column)}: {json.dumps(responses)[:80]} is not generated text: the "
                        "samples of a loglikelihood task (multiple choice, perplexity) have none; analyze a "
                        "generate_until task's samples.")
    return value


def _text(value) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value)


def _number(value) -> float:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], (int, float)):
        return float(value[0])
    return np.nan
