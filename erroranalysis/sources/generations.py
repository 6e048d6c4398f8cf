"""Generations made elsewhere: the files other tools write, read once into one table for `analyze --task
generation`.

    frame, fmt = read_generations("samples_gsm8k_2025-01-01.jsonl", SourceParams())   # format found by content

A table (JSONL, CSV, Parquet, a save_to_disk folder) is read as it is: a `prompt` or `messages` column, the
`output` and the columns a generation run takes (`reference`, `label`, `schema`, `regex`, `tools`, `checks`, a
judge's `score` or `pass`), with what a serving stack says about each generation (`finish_reason`, `usage`, ...)
read by `completions`. Each other tool's format is one module with `detect(path, first_record)` (None when the file
is of that format, else why not) and `read(path, params, encoding=, split=)`, found through `FORMATS`, tried in
order, the table last:

- `inspect`: Inspect AI eval logs (`.eval` or `.json`), read with `inspect_ai.log`, `inspect_log.py`;
- `lm-eval`: lm-evaluation-harness' `--log_samples` files (`samples_<task>_<time>.jsonl`), `lm_eval.py`;
- `openai-batch`: OpenAI Batch API output files joined to their requests (`--requests`), `openai_batch.py`;
- `vllm`: vLLM `RequestOutput` dumps, `vllm.py`;
- `chat`: OpenAI-style chat JSONL, one conversation a line ending with the assistant's answer, `chat_jsonl.py`.

The first record is read whole, however long its line. Each reader keeps `_line` (the file's line, or the sample's
number in a log) so every message names where it came from; `frame.attrs["tried"]` says why the formats before the
one chosen were not it, for the message when a table lacks the output column.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from erroranalysis.core.errors import DataError
from erroranalysis.core.params import Choice, Float, Params, Text, param
from erroranalysis.sources import chat_jsonl, completions, inspect_log, lm_eval, openai_batch, vllm
from erroranalysis.sources.table import InMemory, read_table

TABLE = "table"
FORMATS = {m.NAME: m for m in (inspect_log, lm_eval, openai_batch, vllm, chat_jsonl)}  # tried in this order
CHOICES = ("auto", TABLE, *FORMATS)
PANEL = "Generations made elsewhere (analyze --task generation)"


@dataclass(frozen=True)
class SourceParams(Params):
    """How to read a file of generations made elsewhere: its format, the output column, your judge's score."""

    format: str = param("auto", Choice(*CHOICES), "What wrote the file: table (prompt, output, ... columns), "
                        "lm-eval (--log_samples), inspect (an Inspect AI log), openai-batch (a Batch API output "
                        "file, with --requests), vllm (RequestOutput dumps), chat (OpenAI-style messages); auto "
                        "tells them apart by content.", flag="--source-format", panel=PANEL)
    output_column: str = param("output", Text(), "Column holding the model's output.", panel=PANEL)
    score_column: str | None = param(None, Text(), "Column of your own judge's score (a number, or true/false).",
                                     none="'score', else 'pass', else the tool's own metric (lm-eval's first "
                                          "metric, Inspect's first scorer)", panel=PANEL)
    pass_threshold: float = param(0.5, Float(), "A judge's score at or above this passes (the judge check).",
                                  panel=PANEL)
    requests: str | None = param(None, Text(empty=False), "The OpenAI Batch input file (the requests) that the "
                                 "output file answers: prompts, budgets and body.metadata, joined by custom_id.",
                                 none="needed only for --source-format openai-batch", panel=PANEL)
    filter: str | None = param(None, Text(empty=False), "lm-eval: the filter whose answers are analyzed when the file "
                               "holds several (each filter's score is reported either way).",
                               none="the file's first filter, as lm-eval lists the task's filters", panel=PANEL)

    def judge_column(self, columns, suggested: str | None = None) -> str | None:
        """The judge's column: the one named, else `score` or `pass` when present, else the reader's `suggested`
        (the tool's own metric)."""
        if self.score_column is not None:
            return self.score_column
        return next((c for c in ("score", "pass") if c in columns), suggested)


def detect(path, first=None) -> tuple[str, dict[str, str]]:
    """The format of a generations file, from its name and first record, and why each format tried before it was
    not it ({format: reason})."""
    if path.is_dir() or path.suffix.lower() in (".csv", ".tsv", ".parquet", ".pq"):
        return TABLE, {}
    first = first_record(path) if first is None else first
    tried = {}
    for name, module in FORMATS.items():
        why = module.detect(path, first)
        if why is None:
            return name, tried
        tried[name] = why
    return TABLE, tried


def first_record(path) -> dict | str | None:
    """The file's first JSON record, read whole however long its line: a dict, or for an indented JSON file
    (Inspect's log) the raw start of the text; None when the first line is not JSON."""
    head = _first_line(path)
    try:
        record = json.loads(head)
    except json.JSONDecodeError:
        return head if head.lstrip().startswith("{") else None
    return record if isinstance(record, dict) else None


def _first_line(path) -> str:
    try:
        if isinstance(path, Path):
            with path.open("rb") as handle:
                for raw in handle:
                    if raw.strip():
                        return raw.decode("utf-8", "replace")
            return ""
        return next((ln for ln in path.read_bytes().decode("utf-8", "replace").split("\n") if ln.strip()), "")
    except OSError:
        return ""


def read_generations(path: str | Path | InMemory, params: SourceParams = SourceParams(), *,
                     encoding: str = "utf-8", split: str | None = None) -> tuple[pd.DataFrame, str]:
    """The file as a table with `_line`, and the format it was read as."""
    if isinstance(path, InMemory):
        return completions.read_columns(read_table(path)[0]), TABLE
    path = Path(path) if isinstance(path, str) else path
    if not path.exists():
        raise DataError(f"{path}: no such file; check the path.")
    fmt, tried = detect(path) if params.format == "auto" else (params.format, {})
    if fmt == TABLE:
        frame = completions.read_columns(read_table(path, encoding=encoding, split=split)[0])
    else:
        frame = FORMATS[fmt].read(path, params, encoding=encoding, split=split)
    frame.attrs["tried"] = tried
    return frame, fmt


def not_a_format(tried: dict[str, str]) -> str:
    """Why the file was read as a table, for a message: "not lm-eval (no 'doc' ...), not chat (...)"."""
    return "; ".join(f"not {name}: {why}" for name, why in tried.items())
