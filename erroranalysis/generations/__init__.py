"""Generations made elsewhere: the files other tools write, read as one table for `analyze --task generation`.

    frame, fmt = read_generations("samples_gsm8k_2025-01-01.jsonl", SourceParams())   # format found by content

A table (JSONL, CSV, Parquet, a save_to_disk folder) is read as it is: a `prompt` or `messages` column, the
`output` and the columns a generation run takes (`reference`, `label`, `schema`, `regex`, `tools`, `checks`, a
judge's `score` or `pass`). The readers of other tools' files turn theirs into such a table:

- `lm-eval`: lm-evaluation-harness' `--log_samples` files (`samples_<task>_<time>.jsonl`), `lm_eval.py`;
- `inspect`: Inspect AI eval logs (`.eval` or `.json`), read with `inspect_ai.log`, `inspect_logs.py`;
- `chat`: OpenAI-style chat JSONL, one conversation a line ending with the assistant's answer, `chat.py`.

Each keeps `_line` (the file's line, or the sample's number in a log) so every message names where it came from.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from erroranalysis.core.errors import DataError
from erroranalysis.core.params import Choice, Float, Params, Text, param
from erroranalysis.sources.table import InMemory, read_table

FORMATS = ("auto", "table", "lm-eval", "inspect", "chat")
PANEL = "Generations made elsewhere (analyze --task generation)"


@dataclass(frozen=True)
class SourceParams(Params):
    """How to read a file of generations made elsewhere: its format, the output column, your judge's score."""

    format: str = param("auto", Choice(*FORMATS), "What wrote the file: table (prompt, output, ... columns), "
                        "lm-eval (--log_samples), inspect (an Inspect AI log), chat (OpenAI-style messages); "
                        "auto tells them apart by content.", flag="--source-format", panel=PANEL)
    output_column: str = param("output", Text(), "Column holding the model's output.", panel=PANEL)
    score_column: str | None = param(None, Text(), "Column of your own judge's score (a number, or true/false).",
                                     none="'score', else 'pass', else the tool's own metric (lm-eval's first "
                                          "metric, Inspect's first scorer)", panel=PANEL)
    pass_threshold: float = param(0.5, Float(), "A judge's score at or above this passes (the judge check).",
                                  panel=PANEL)

    def judge_column(self, columns, suggested: str | None = None) -> str | None:
        """The judge's column: the one named, else `score` or `pass` when present, else the reader's `suggested`
        (the tool's own metric)."""
        if self.score_column is not None:
            return self.score_column
        return next((c for c in ("score", "pass") if c in columns), suggested)


def detect(path: Path) -> str:
    """The format of a generations file, from its name and first record."""
    suffix = path.suffix.lower()
    if path.is_dir() or suffix in (".csv", ".tsv", ".parquet", ".pq"):
        return "table"
    if suffix == ".eval":
        return "inspect"
    head = _head(path)
    if suffix == ".json" and head.lstrip().startswith("{") and '"eval"' in head[:8192] and "\n" in head[:200]:
        return "inspect"  # Inspect's JSON log: one indented object, {"version", "status", "eval", ..., "samples"}
    line = next((ln for ln in head.splitlines() if ln.strip()), "")
    try:
        first = json.loads(line)
    except json.JSONDecodeError:
        return "table"
    if isinstance(first, dict) and "doc" in first and ("resps" in first or "filtered_resps" in first):
        return "lm-eval"
    if isinstance(first, dict) and "output" not in first and _ends_with_answer(first.get("messages")):
        return "chat"
    return "table"


def _head(path: Path) -> str:
    try:
        with path.open("rb") as handle:
            return handle.read(1 << 20).decode("utf-8", "replace")
    except OSError:
        return ""


def _ends_with_answer(messages) -> bool:
    return isinstance(messages, list) and bool(messages) and isinstance(messages[-1], dict) \
        and messages[-1].get("role") == "assistant"


def read_generations(path: str | Path | InMemory, params: SourceParams = SourceParams(), *,
                     encoding: str = "utf-8", split: str | None = None) -> tuple[pd.DataFrame, str]:
    """The file as a table with `_line`, and the format it was read as."""
    if isinstance(path, InMemory):
        return read_table(path)[0], "table"
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: no such file; check the path.")
    fmt = detect(path) if params.format == "auto" else params.format
    if fmt == "table":
        return read_table(path, encoding=encoding, split=split)[0], fmt
    if fmt == "lm-eval":
        from erroranalysis.sources.lm_eval import read_samples

        return read_samples(path, encoding=encoding), fmt
    if fmt == "inspect":
        from erroranalysis.sources.inspect_log import read_log

        return read_log(path), fmt
    from erroranalysis.sources.chat_jsonl import read_chat

    return read_chat(path, encoding=encoding), fmt
