"""What the checks stage's two paths share (`data_checks.py` in process, `data_checks_ray.py` and `check_ray_train.py`
on the workers): the stage's parameters, the empty leakage columns of a run checked without a training file, how a
training file is read, and the run's checkpoint that embeds its texts."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from erroranalysis import rundir
from erroranalysis.core.params import SEED, Choice, File, Flag, Float, Int, Params, Text, param, spec_field
from erroranalysis.datachecks.contamination import DEFAULT_N
from erroranalysis.datachecks.label_issues import FILTERS, KNN_K, KNN_WEIGHT, METHODS
from erroranalysis.embed.choice import EmbedderName


@dataclass(frozen=True)
class CheckParams(Params):
    """The data checks (`erroranalysis data-checks --help`): label issues, duplicates, and with a training file leakage
    and shift. `embedder` picks the vectors of near duplicates, leakage, the shift classifier and the label-issue
    neighbour vote by the rule `embedder_choice.plan`; the train file is read with the eval set's column names unless `train_*_column`
    say otherwise."""

    train: str | None = param(None, File(), "Training data (.jsonl, .csv, .parquet or a save_to_disk folder; a "
                              "file may be an s3://, gs:// or az:// URL): adds "
                              "train/eval leakage and distribution shift; on a generation run, SFT rows (messages, "
                              "prompt/completion or text) and n-gram contamination, near-duplicate training prompts "
                              "and lengths.", none="no leakage or shift checks")
    embedder: str = param("auto", EmbedderName(), "Vectors of the label-issue neighbour vote, near duplicates, "
                          "leakage and shift: auto (the checkpoint's hidden states when the run has them, else the "
                          "static model, with MiniLM where it is weaker up to 20,000 rows), static, minilm (at any "
                          "size), hidden, none (exact duplicates only, no domain classifier) or a local "
                          "sentence-transformers or model2vec folder.", flag="--check-embedder")
    label_issue_neighbors: float = param(KNN_WEIGHT, Float(0, 1), "Weight of the neighbours' labels in the "
                                         "label-issue score (0: the model's confidence alone).", advanced=True)
    label_issue_k: int = param(KNN_K, Int(1, 500), "Neighbours whose labels vote in the label-issue score.",
                               advanced=True)
    near_threshold: float = param(0.95, Float(0, 1, low_open=True), "Cosine similarity at or above which two texts "
                                  "are near duplicates.")
    neighbors: int = param(10, Int(1), "Nearest neighbours kept per text in the duplicate search.",
                           flag="--duplicate-neighbors")
    block_size: int = param(4096, Int(1), "Rows per block of the exact neighbour search (memory).",
                            flag="--check-block-size", advanced=True)
    label_issue_method: str = param("self_confidence", Choice(*METHODS), "cleanlab's label-quality score.",
                                    advanced=True)
    filter_by: str = param("prune_by_noise_rate", Choice(*FILTERS), "cleanlab's rule for flagging label issues.",
                           advanced=True)
    shift: bool = param(True, Flag(), "With a training file: the distribution-shift report.")
    train_text_column: str | None = param(None, Text(), "Text column of the training file.",
                                          none="the eval set's")
    train_label_column: str | None = param(None, Text(), "Label column of the training file.",
                                           none="the eval set's")
    train_id_column: str | None = param(None, Text(), "Id column of the training file.", none="row number")
    encoding: str = param("utf-8", Text(), "Text encoding of a CSV/JSONL training file.", flag="--train-encoding")
    split: str | None = param(None, Text(), "Split of a saved DatasetDict training file.", flag="--train-split",
                              none="the only split")
    ngram: int = param(DEFAULT_N, Int(1, 100), "Generation runs with --train: words per n-gram of the contamination "
                       "check (13 as GPT-3 and lm-evaluation-harness; 8 as Tulu 3).")
    train_near_threshold: float = param(0.8, Float(0, 1, low_open=True), "Generation runs with --train: Jaccard "
                                        "similarity (word 3-grams, MinHash) at or above which two training prompts "
                                        "are near duplicates.")
    near_sample: int = param(100_000, Int(2), "Under --engine ray: rows (every row up to this many, else a seeded "
                             "sample) among which near duplicates are searched; with --train, the eval and training "
                             "rows (as many of each) of the near-leakage search. checks.json states them.",
                             advanced=True)
    minhash_perm: int = param(128, Int(16, 1024), "Permutations of the MinHash signatures (more: better recall, "
                              "slower).", advanced=True)
    seed: int = spec_field(SEED)


def no_leakage(table, report) -> None:
    """No training file: the leakage and contamination columns empty, the sections None."""
    n = len(table)
    table["contaminated_fields"] = pd.array([None] * n, dtype="string")
    table["train_row"] = pd.array([None] * n, dtype="Int64")
    report["contamination"] = None
    table["in_train"] = pd.array([None] * n, dtype="boolean")
    table["train_id"] = pd.array([None] * n, dtype="string")
    table["train_similarity"] = np.full(n, np.nan, dtype=np.float32)
    table["train_label_differs"] = pd.array([None] * n, dtype="boolean")
    report["leakage"] = None
    report["shift"] = None


def load_train(run: rundir.Run, params: CheckParams):
    """The training file as an `EvalSet`, read with the eval set's column names (from the run's manifest) unless
    `params.train_*_column` say otherwise, its gold read by the run's task (`train_gold.TrainGold`)."""
    from erroranalysis.sources.train_table import read_train_set
    from erroranalysis.stages.train_gold import TrainGold

    opts = train_options(run, params)
    gold = TrainGold.of(run)
    return read_train_set(params.train, text_column=opts.text_column, label_column=opts.label_column,
                          id_column=opts.id_column, encoding=opts.encoding, split=opts.split,
                          read=None if run.task == "classification" else lambda path, table: gold.read(path, table,
                                                                                                       opts))


def train_options(run: rundir.Run, params: CheckParams):
    """How the training file is read (`DataOptions`): the eval set's column names (from the run's manifest) unless
    `params.train_*_column` say otherwise."""
    from erroranalysis.sources.table import DataOptions

    columns = run.manifest.get("data", {}).get("columns", {}) or {}
    return DataOptions(text_column=params.train_text_column or columns.get("text") or "text",
                       label_column=params.train_label_column or columns.get("label") or "label",
                       id_column=params.train_id_column, encoding=params.encoding, split=params.split)


def checkpoint_embed(run) -> Callable:
    """Train texts through the run's own checkpoint (mean-pooled last hidden state, as inference wrote for the
    eval set), loaded only when a train file needs it."""
    model = run.manifest.get("model") or {}

    def embed(texts: list[str]) -> np.ndarray:
        from erroranalysis.core.errors import ModelError
        from erroranalysis.infer.classifier import infer

        path = model.get("path")
        if not path or not Path(path).is_dir():
            raise ModelError(f"{run.path}: the run's checkpoint {path!r} is gone, and the train texts need it for "
                             "leakage and shift with its hidden states; pass --embedder minilm.")
        clf = _classifier(path, tuple((f.name, f.stat().st_mtime_ns) for f in sorted(Path(path).iterdir())))
        chunks = infer(clf, list(texts), None, batch_size=model.get("batch_size"), max_tokens=model.get("max_tokens"),
                       max_length=int(model.get("max_length") or 256), precision=model.get("precision") or "fp32")
        return np.concatenate([c["hidden"] for c in chunks]) if texts else np.zeros((0, 0), np.float32)

    return embed


@functools.lru_cache(maxsize=1)
def _classifier(path: str, stamp: tuple):
    """The checkpoint, loaded once per process while its files (`stamp`: names and times) stay as they were: under
    Ray each training block embeds its rows in a worker, which keeps it for the next block."""
    from erroranalysis.infer.classifier import load_classifier

    return load_classifier(path)
