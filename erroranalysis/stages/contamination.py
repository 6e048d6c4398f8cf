"""The data checks of a generation run with a training file (`data-checks RUN --train sft.jsonl`): n-gram
contamination of each eval prompt and reference with the training rows, the run's metrics on clean and
contaminated examples apart, near-duplicate training prompts (MinHash LSH) and train/eval length distributions.

The training file is read (and refused, with the line and column of a bad cell) before the checks stage starts;
`checks_run` calls `contamination_checks` inside it and commits the columns into checks.parquet and the section
into checks.json ("contamination").
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from erroranalysis import rundir
from erroranalysis.core import storage
from erroranalysis.rundir import readers

LENGTH_SAMPLE = 100_000  # training prompts whose lengths are measured, at most


@dataclass
class TrainTexts:
    """A training file's rows as texts (`sft_texts`: prompt, answer, text) with their ids."""

    path: Path
    frame: pd.DataFrame
    ids: np.ndarray

    def __len__(self) -> int:
        return len(self.frame)


def read_train_texts(params) -> TrainTexts:
    """The training file of `params` (CheckParams) as SFT texts; ids from `train_id_column` or the 0-based row."""
    from erroranalysis.datachecks.train_texts import sft_texts
    from erroranalysis.sources.table import as_source, read_table

    path = as_source(params.train)  # a URL: read from object storage
    raw, _ = read_table(path, encoding=params.encoding, split=params.split)
    frame = sft_texts(raw, str(path), params.train_text_column)
    return TrainTexts(path, frame, train_ids(raw, path, params.train_id_column))


def train_ids(raw: pd.DataFrame, path, id_column: str | None, first_row: int = 0) -> np.ndarray:
    """The ids of training rows `raw` (the file's rows from `first_row`): `id_column`'s values, or the 0-based row."""
    from erroranalysis.core.errors import DataError, preview

    if id_column is not None:
        if id_column not in raw.columns:
            raise DataError(f"{path}: no id column {id_column!r} (columns found: "
                            f"{preview([c for c in raw.columns if c != '_line'], 8)}); fix --train-id-column.")
        return raw[id_column].astype(str).to_numpy(dtype=object)
    return np.array([str(i) for i in range(first_row, first_row + len(raw))], dtype=object)


def contamination_checks(run: "rundir.Run", train: TrainTexts, params, say: Callable[[str], None],
                         advance: Callable[[int], None] | None = None) -> tuple[dict, dict]:
    """The per-example columns and the "contamination" section of a generation run against `train`."""
    from erroranalysis.datachecks import contamination_report as report
    from erroranalysis.datachecks.contamination import chunked, find_contamination
    from erroranalysis.datachecks.contamination_blocks import sample_rows
    from erroranalysis.datachecks.lengths import length_report

    preds = readers.read_predictions(run, columns=["prompt", "reference", "reference_loss", "score"])
    prompts = column_strings(preds, "prompt", fallback="text")
    references = column_strings(preds, "reference")
    train_texts = train.frame["text"].tolist()
    fields = {}
    for field, texts in (("prompt", prompts), ("reference", references)):
        if any(texts):
            say(f"{params.ngram}-gram overlap of eval {field}s with {len(train):,} training rows")
            fields[field] = find_contamination(texts, chunked(train_texts), n=params.ngram, progress=advance)
    loss = preds["reference_loss"].to_numpy(dtype=np.float64) if "reference_loss" in preds else None
    score = preds["score"].to_numpy(dtype=np.float64) if "score" in preds else None
    section, columns = report.contamination_section(
        fields, preds["example_id"].to_numpy(dtype=object), train.ids, len(preds), storage.record_name(train.path),
        len(train), preds["correct"].to_numpy(dtype=bool), loss, score)
    section["ngram"] = params.ngram
    say(f"near-duplicate training prompts (MinHash LSH, Jaccard >= {params.train_near_threshold})")
    section["near_duplicates"] = _near_duplicates(train, params)
    say("train/eval lengths")
    count, tokenizer = _token_counter(run)
    train_prompts = train.frame["prompt"].tolist()
    # a seeded sample estimates the quantiles well and bounds tokenizing
    train_prompts = [train_prompts[i] for i in sample_rows(len(train_prompts), LENGTH_SAMPLE, params.seed)]
    section["lengths"] = length_report(train_prompts, prompts, count, tokenizer)
    section["lengths"]["n_train_measured"] = len(train_prompts)
    return columns, section


def column_strings(preds: pd.DataFrame, column: str, fallback: str | None = None) -> list[str]:
    """A column's cells as strings, "" where missing (`fallback`'s when there is no `column`; all "" without
    either): the prompts and references of both engines."""
    if column not in preds and fallback:
        column = fallback
    if column not in preds:
        return [""] * len(preds)
    return ["" if v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v)) else str(v)
            for v in preds[column].tolist()]


def _near_duplicates(train: TrainTexts, params) -> dict:
    from erroranalysis.datachecks.contamination_report import near_duplicate_section
    from erroranalysis.datachecks.near_duplicates import groups, minhash_pairs

    prompts = train.frame["prompt"].tolist()
    pairs = minhash_pairs(prompts, threshold=params.train_near_threshold, num_perm=params.minhash_perm,
                          seed=params.seed + 1)
    return near_duplicate_section(prompts, pairs, groups(len(prompts), pairs), train.ids,
                                  params.train_near_threshold, params.minhash_perm)


def _token_counter(run) -> tuple[Callable | None, str | None]:
    """Token counts with the run's own tokenizer, when its model folder is still there (else words only)."""
    return token_counter((run.manifest.get("model") or {}).get("path"))


def token_counter(path: str | None) -> tuple[Callable | None, str | None]:
    """Token counts with the tokenizer of model folder `path` (None, gone, or without one: words only)."""
    if not path or not Path(path).is_dir():
        return None, None
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(path)
    except Exception:  # a folder without a tokenizer (or one transformers cannot read): words only
        return None, None

    def count(texts) -> np.ndarray:
        if not len(texts):
            return np.zeros(0, dtype=np.int64)
        encoded = tokenizer(list(texts), add_special_tokens=False)["input_ids"]
        return np.array([len(ids) for ids in encoded], dtype=np.int64)

    return count, str(path)


def set_columns(table: pd.DataFrame, columns: dict) -> None:
    """checks.parquet's contamination columns from `contamination_report.row_columns` (both engines)."""
    table["in_train"] = pd.array(columns["in_train"], dtype="boolean")
    table["train_id"] = pd.array(columns["train_id"], dtype="string")
    table["train_similarity"] = columns["train_similarity"]
    table["contaminated_fields"] = pd.array(columns["contaminated_fields"], dtype="string")
    table["train_row"] = pd.array(np.where(columns["in_train"], columns["train_row"], None), dtype="Int64")


def add_section(report: dict, section: dict) -> None:
    """The contamination section and its findings into checks.json's `report` (both engines)."""
    from erroranalysis.core.findings import SEVERITIES
    from erroranalysis.datachecks.contamination_report import findings

    report["contamination"] = section
    extra = [f.to_dict() for f in findings(section)]
    report["findings"] = sorted(report["findings"] + extra, key=lambda f: SEVERITIES.index(f["severity"]))
