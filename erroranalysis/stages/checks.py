"""The checks stage: is the label or the data wrong, rather than the model?

`checks_run(run_dir, train=...)` reads a run directory and writes

- `checks.parquet`: one row per example (predictions order): label-issue score and flag, duplicate group and
  label conflict, and with a train file whether the example also appears in training;
- `checks.json`: counts, the top suspects, the duplicate groups, leakage, the shift report (with a train
  file) and plain-language findings.

Both files appear together or not at all, inside `run.stage("checks", params)`; every input is checked before
the stage starts, so a bad call leaves earlier artifacts untouched. See docs/run-directory.md.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from erroranalysis import rundir
from erroranalysis.datachecks.findings import checks_findings
from erroranalysis.errors import DataError, RunError, preview
from erroranalysis.validation import check_param

CHECKS = "checks.parquet"
CHECKS_JSON = "checks.json"
CHECK_COLUMNS = ["example_id", "label_issue_score", "label_issue", "suggested_label", "duplicate_group",
                 "duplicate_kind", "duplicate_conflict", "in_train", "train_id", "train_similarity",
                 "train_label_differs"]


EMBEDDERS = ("minilm", "none")


def checks_run(run_dir: str | Path, *, train=None, embedder: str | Callable = "minilm",
               near_threshold: float = 0.95, neighbors: int = 10, block_size: int = 4096,
               label_issue_method: str = "self_confidence", filter_by: str = "prune_by_noise_rate",
               shift: bool = True, train_text_column: str | None = None, train_label_column: str | None = None,
               train_id_column: str | None = None, encoding: str = "utf-8", split: str | None = None,
               seed: int = 0, progress: Callable[[str], None] | None = None) -> dict:
    """Run label-issue, duplicate, leakage and shift checks on a run; returns a summary (counts and findings).

    `embedder`: "minilm" (the packaged sentence model), "none" (exact duplicates only, no domain classifier) or
    a function texts -> float [n, d]. `train`: a training file in any eval-set format, read with the eval set's
    column names unless `train_*_column` say otherwise (or an `EvalSet` already loaded).
    """
    from erroranalysis.datachecks.label_issues import FILTERS, METHODS

    say = progress or (lambda message: None)
    run = rundir.Run.open(run_dir)
    check_param("embedder", embedder, callable(embedder) or embedder in EMBEDDERS,
                "'minilm', 'none' or a function texts -> vectors")
    check_param("near_threshold", near_threshold,
                isinstance(near_threshold, (int, float)) and 0 < near_threshold <= 1, "a cosine similarity in (0, 1]")
    check_param("neighbors", neighbors, isinstance(neighbors, int) and neighbors >= 1, "an integer >= 1")
    check_param("block_size", block_size, isinstance(block_size, int) and block_size >= 1, "an integer >= 1")
    check_param("label_issue_method", label_issue_method, label_issue_method in METHODS, f"one of {', '.join(METHODS)}")
    check_param("filter_by", filter_by, filter_by in FILTERS, f"one of {', '.join(FILTERS)}")
    preds = run.predictions(columns=["example_id", "text", "label", "pred", "correct"])
    probs = run.probs()
    labels = run.labels
    if probs is not None and probs.shape != (len(preds), len(labels)):
        raise DataError(f"{run.file(rundir.PROBS)}: shape {tuple(probs.shape)}, expected ({len(preds)}, {len(labels)}) "
                        f"to match {rundir.PREDICTIONS} and the manifest labels; re-run the run.")
    if probs is not None and len(labels) >= 2 and len(preds):
        from erroranalysis.datachecks.label_issues import validate

        validate(preds["label"].astype(str).to_numpy(dtype=object), np.asarray(probs), labels,
                 source=str(run.file(rundir.PROBS)))  # NaN or unknown labels fail here, before the stage starts
    train_set = load_train(run, train, text_column=train_text_column, label_column=train_label_column,
                           id_column=train_id_column, encoding=encoding, split=split) if train is not None else None
    embed = _embedder(embedder)
    params = {"train": str(Path(train_set.path).resolve()) if train_set is not None else None,
              "embedder": embedder if isinstance(embedder, str) else getattr(embedder, "__name__", "custom"),
              "near_threshold": near_threshold, "neighbors": neighbors, "label_issue_method": label_issue_method,
              "filter_by": filter_by, "shift": shift and train is not None, "seed": seed}

    with run.stage("checks", params) as facts:
        texts = preds["text"].astype(str).tolist()
        gold = preds["label"].astype(str).to_numpy(dtype=object)
        ids = preds["example_id"].astype(str).to_numpy(dtype=object)
        report: dict = {"n_examples": len(preds), "params": params}
        table = pd.DataFrame({"example_id": ids})

        say("label issues")
        issues = _label_issues(gold, probs, labels, label_issue_method, filter_by, run)
        table["label_issue_score"] = issues["label_issue_score"].to_numpy()
        table["label_issue"] = issues["label_issue"].to_numpy()
        table["suggested_label"] = issues["suggested_label"].to_numpy()
        report["label_issues"] = _label_issue_summary(issues, ids, gold, preds["correct"].to_numpy(), probs,
                                                      label_issue_method, filter_by)

        eval_vectors = train_vectors = None
        if embed is not None:
            say(f"embedding {len(texts)} eval texts")
            eval_vectors = np.asarray(embed(texts), dtype=np.float32)
            if train_set is not None:
                say(f"embedding {len(train_set)} train texts")
                train_vectors = np.asarray(embed(train_set.frame["text"].tolist()), dtype=np.float32)

        say("duplicates")
        from erroranalysis.datachecks.duplicates import duplicate_summary, find_duplicates, find_leakage

        dups = find_duplicates(texts, gold, embeddings=eval_vectors, near=embed is not None,
                               threshold=near_threshold, k=neighbors, block_size=block_size)
        for column in ("duplicate_group", "duplicate_kind", "duplicate_conflict"):
            table[column] = dups[column].to_numpy()
        report["duplicates"] = {"near": embed is not None, "threshold": near_threshold,
                                **duplicate_summary(dups, ids, gold)}

        n = len(table)
        table["in_train"] = pd.array([None] * n, dtype="boolean")
        table["train_id"] = pd.array([None] * n, dtype="string")
        table["train_similarity"] = np.full(n, np.nan, dtype=np.float32)
        table["train_label_differs"] = pd.array([None] * n, dtype="boolean")
        report["leakage"] = None
        report["shift"] = None
        if train_set is not None:
            say("leakage")
            train_frame = train_set.frame
            train_labels = _train_labels(train_frame["label"].astype(str).to_numpy(dtype=object), labels)
            leak = find_leakage(texts, train_frame["text"].tolist(), eval_labels=gold, train_labels=train_labels,
                                eval_embeddings=eval_vectors, train_embeddings=train_vectors,
                                near=embed is not None, threshold=near_threshold, block_size=block_size)
            hit = leak["in_train"].to_numpy()
            train_ids = train_frame["example_id"].astype(str).to_numpy(dtype=object)
            table["in_train"] = pd.array(hit, dtype="boolean")
            table["train_id"] = pd.array(np.where(hit, train_ids[np.maximum(leak["train_index"].to_numpy(), 0)],
                                                  None), dtype="string")
            table["train_similarity"] = leak["train_similarity"].to_numpy(dtype=np.float32)
            table["train_label_differs"] = pd.array(leak["train_label_differs"].to_numpy(), dtype="boolean")
            report["leakage"] = _leakage_summary(leak, ids, gold, train_ids, train_labels, train_set, embed is not None)
            if shift:
                say("distribution shift")
                from erroranalysis.datachecks.shift import shift_report

                shifted = shift_report(train_frame["text"].tolist(), texts, train_labels=train_labels,
                                       eval_labels=gold, train_embeddings=train_vectors, eval_embeddings=eval_vectors,
                                       domain_classifier=embed is not None, seed=seed)
                domain = shifted.get("domain")
                if domain and domain.get("least_like_train"):
                    for row in domain["least_like_train"]:
                        row["example_id"] = str(ids[row["eval_index"]])
                report["shift"] = shifted

        findings = checks_findings(report)
        report["findings"] = [f.to_dict() for f in findings]
        table = table[CHECK_COLUMNS]
        with rundir.atomic_files(run.file(CHECKS), run.file(CHECKS_JSON)) as (parquet_tmp, json_tmp):
            table.to_parquet(parquet_tmp, index=False)
            rundir.write_json(json_tmp, report)
        summary = _summary(report)
        facts.update({k: v for k, v in summary.items() if k != "findings"})
    return summary


def load_train(run: "rundir.Run", path, *, text_column: str | None = None, label_column: str | None = None,
               id_column: str | None = None, encoding: str = "utf-8", split: str | None = None):
    """The training file as an `EvalSet`, read with the eval set's column names (from the run's manifest) unless
    `text_column` / `label_column` say otherwise. An `EvalSet` already loaded is returned as it is."""
    from erroranalysis.data import EvalSet

    if isinstance(path, EvalSet):
        return path
    columns = run.manifest.get("data", {}).get("columns", {}) or {}
    return read_train_file(path, text_column=text_column or columns.get("text") or "text",
                           label_column=label_column or columns.get("label") or "label", id_column=id_column,
                           encoding=encoding, split=split)


def read_train_file(path: str | Path, *, text_column: str = "text", label_column: str = "label",
                    id_column: str | None = None, encoding: str = "utf-8", split: str | None = None):
    """A training file in any eval-set format. A file without the expected columns is a one-line DataError
    naming the file and every missing column."""
    from erroranalysis.data import load_eval_set, read_table

    path = Path(path)
    try:
        return load_eval_set(path, text_column=text_column, label_column=label_column, id_column=id_column,
                             encoding=encoding, split=split)
    except DataError as exc:
        if "no column" not in str(exc) and "no id column" not in str(exc):
            raise
    raw, _ = read_table(path, encoding=encoding, split=split)
    found = [str(c) for c in raw.columns if c != "_line"]
    missing = [c for c in (text_column, label_column, id_column) if c and c not in raw.columns]
    raise DataError(f"{path}: the train file lacks the eval set's column(s) {', '.join(repr(c) for c in missing)} "
                    f"(columns found: {preview(found, 8)}); rename them in the train file or pass "
                    "--train-text-column / --train-label-column.")


def _train_labels(values: np.ndarray, labels: list[str]) -> np.ndarray:
    """Train labels as class names: integer ids into the run's labels are mapped when no value is a name."""
    known = set(labels)
    if labels and not any(v in known for v in values) and all(v.isdigit() and int(v) < len(labels) for v in values):
        return np.array([labels[int(v)] for v in values], dtype=object)
    return values


def _embedder(embedder):
    if callable(embedder):
        return embedder
    if embedder == "none":
        return None
    from erroranalysis.embedding import MiniLMEmbedder, minilm_path

    minilm_path()  # fail before the stage starts when the package is missing
    return MiniLMEmbedder().embed_texts


def _label_issues(gold, probs, labels, method, filter_by, run) -> pd.DataFrame:
    n = len(gold)
    if probs is None or len(labels) < 2 or n == 0:
        return pd.DataFrame({"label_issue_score": np.full(n, np.nan, dtype=np.float32),
                             "label_issue": pd.array([None] * n, dtype="boolean"),
                             "suggested_label": pd.array([None] * n, dtype="string")})
    from erroranalysis.datachecks.label_issues import find_label_issues

    found = find_label_issues(gold, np.asarray(probs), labels, method=method, filter_by=filter_by,
                              source=str(run.file(rundir.PROBS)))
    found["label_issue"] = pd.array(found["label_issue"].to_numpy(), dtype="boolean")
    found["suggested_label"] = pd.array(found["suggested_label"].astype(str).to_numpy(), dtype="string")
    return found


def _label_issue_summary(issues, ids, gold, correct, probs, method, filter_by, limit: int = 20) -> dict:
    if probs is None:
        return {"available": False, "reason": "the run has no probabilities (probs.npy)"}
    flags = issues["label_issue"].to_numpy(dtype=bool, na_value=False)
    scores = issues["label_issue_score"].to_numpy()
    failures = ~np.asarray(correct, dtype=bool)
    order = np.argsort(-scores, kind="stable")[:limit]
    return {
        "available": True, "method": method, "filter_by": filter_by,
        "n_flagged": int(flags.sum()), "share_flagged": float(flags.mean()) if len(flags) else 0.0,
        "n_failures": int(failures.sum()), "n_failures_flagged": int((flags & failures).sum()),
        "share_of_failures_flagged": float((flags & failures).sum() / failures.sum()) if failures.any() else 0.0,
        "top": [{"example_id": str(ids[i]), "label": str(gold[i]),
                 "suggested_label": str(issues["suggested_label"].iat[i]), "score": float(scores[i]),
                 "label_issue": bool(flags[i])} for i in order],
    }


def _leakage_summary(leak, ids, gold, train_ids, train_labels, train_set, near: bool, limit: int = 20) -> dict:
    hit = leak["in_train"].to_numpy()
    kinds = leak["train_kind"].to_numpy()
    differs = leak["train_label_differs"].to_numpy()
    rows = np.flatnonzero(hit)
    order = rows[np.lexsort((-leak["train_similarity"].to_numpy()[rows], ~differs[rows]))][:limit]
    return {
        "train_path": str(train_set.path), "n_train": len(train_set), "near": near,
        "n_in_train": int(hit.sum()), "share_in_train": float(hit.mean()) if len(hit) else 0.0,
        "n_exact": int((kinds == "exact").sum()), "n_near": int((kinds == "near").sum()),
        "n_label_differs": int(differs.sum()),
        "examples": [{"example_id": str(ids[i]), "label": str(gold[i]),
                      "train_id": str(train_ids[leak["train_index"].iat[i]]),
                      "train_label": str(train_labels[leak["train_index"].iat[i]]),
                      "kind": str(kinds[i]), "similarity": float(leak["train_similarity"].iat[i])} for i in order],
    }


def _summary(report: dict) -> dict:
    issues = report["label_issues"]
    leak, shift = report.get("leakage"), report.get("shift")
    domain = (shift or {}).get("domain") or {}
    return {
        "n_examples": report["n_examples"],
        "n_label_issues": issues.get("n_flagged") if issues.get("available") else None,
        "n_duplicate_groups": report["duplicates"]["n_groups"],
        "n_conflict_groups": report["duplicates"]["n_conflict_groups"],
        "n_in_train": leak["n_in_train"] if leak else None,
        "domain_auc": domain.get("auc"),
        "findings": report["findings"],
    }


def read_checks(run: "rundir.Run") -> pd.DataFrame:
    """checks.parquet of a run (a RunError naming the command when the stage was not run)."""
    return run.read_parquet(CHECKS, "checks")


def read_checks_report(run: "rundir.Run") -> dict:
    import json

    file = run.file(CHECKS_JSON)
    if not file.is_file():
        raise RunError(f"{run.path}: missing {CHECKS_JSON}; run 'erroranalysis checks {run.path}' first.")
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RunError(f"{file}: unreadable ({exc}); run 'erroranalysis checks {run.path}' again.") from None


def label_issue_share(checks: pd.DataFrame, example_ids: Sequence[str]) -> float:
    """Share of `example_ids` flagged as probable label issues in `checks` (checks.parquet); NaN when none of
    them has a flag (no checks for them, or the run had no probabilities). For the per-cluster diagnostic
    "probably mislabeled"."""
    wanted = pd.Index([str(i) for i in example_ids])
    if not len(wanted) or "label_issue" not in checks.columns:
        return math.nan
    flags = checks.loc[checks["example_id"].astype(str).isin(wanted), "label_issue"]
    flags = flags.dropna()
    return float(flags.astype(bool).mean()) if len(flags) else math.nan
