"""The checks stage: is the label or the data wrong, rather than the model?

`checks_run(run_dir, CheckParams(train=...))` reads a run directory and commits

- `checks.parquet`: one row per example (predictions order): label-issue score and flag, duplicate group and
  label conflict, and with a train file whether the example also appears in training;
- `checks.json`: counts, the top suspects, the duplicate groups, leakage, the shift report (with a train
  file) and plain-language findings.

Every input is checked before the stage starts, so a bad call leaves earlier artifacts untouched. See
docs/run-directory.md.

Under `--engine ray` the checks run on the workers, block by block (`erroranalysis.stages.data_checks_ray`):
label-issue scores and flags (classification, multi-label) and exact duplicate groups as in-process, near
duplicates among a seeded sample of `near_sample` rows that checks.json states; with a train file, the exact leakage
and shift report of a classification, multi-label, regression or token-classification run as in-process and near
leakage on seeded samples (`check_ray_train`), a generation run's contamination checks as in-process
(`contamination_ray`). A train file the workers cannot read (`inputs.workers_read`) is read on the driver, and the
run says so on stderr. Both engines read a train file's gold by the run's task (`train_gold.TrainGold`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from erroranalysis import rundir
from erroranalysis.core import schemas, storage
from erroranalysis.datachecks import report as checks_report
from erroranalysis.engines.blocks import call_on_worker
from erroranalysis.rundir import CHECKS, CHECKS_JSON, readers
from erroranalysis.stages import inputs
from erroranalysis.stages.check_parts import CheckParams, checkpoint_embed, load_train, no_leakage
from erroranalysis.stages.train_gold import TrainGold


def checks_run(run_dir: str | Path, params: CheckParams = CheckParams(), *, embed: Callable | None = None,
               train_set=None, progress=None, engine=None, **overrides) -> dict:
    """Run label-issue, duplicate, leakage and shift checks on a run; returns a summary (counts and findings).

    `embed` (texts -> float [n, d]) replaces the embedder `params` names; `train_set` (an `EvalSet` already
    loaded) replaces `params.train`. `progress`: an `erroranalysis.core.progress.Reporter`, or a function that gets
    each step's name; `engine` (`erroranalysis.engines.Engine`) runs the MiniLM embedding on Ray when asked."""
    from erroranalysis.core.progress import Reporter, as_reporter

    if callable(overrides.get("embedder")):  # the 0.1 API took the function as `embedder`
        embed = overrides.pop("embedder")
    params = params.replace(**overrides) if overrides else params
    reporter = progress if isinstance(progress, Reporter) else as_reporter(None)
    say = progress if callable(progress) and not isinstance(progress, Reporter) else (lambda message: None)
    run = rundir.Run.open(run_dir)
    if engine is not None and engine.distributed:
        from erroranalysis.stages import data_checks_ray

        why = data_checks_ray.supported(run, params, train_set, embed)
        if why is None:
            return _checks_on_ray(run, params, embed, engine, reporter, train_set)
        reporter.note(f"checks: --engine ray: {why}")
    preds = readers.read_predictions(run, columns=["example_id", "text", "label", "pred", "correct"])
    probs = readers.read_probs(run)
    _check_probs(run, preds, probs)
    sft_train = None
    if run.task == "generation" and train_set is None and params.train is not None:
        from erroranalysis.stages.contamination import read_train_texts

        sft_train = read_train_texts(params)  # SFT rows: contamination instead of the classifier's leakage
    elif train_set is None and params.train is not None:
        train_set = load_train(run, params)
    n_rows = len(preds) + (len(train_set) if train_set is not None else 0)
    vectors = _Vectors.custom(embed) if embed is not None else _Vectors.of(run, params.embedder, engine, n_rows)
    trained = train_set if train_set is not None else sft_train
    record = {**params.record(), "train": storage.record_name(trained.path) if trained is not None else None,
              "embedder": vectors.source, "vectors": vectors.plan.record(),
              "shift": params.shift and train_set is not None}
    if vectors.plan.note:
        reporter.note(f"checks: {vectors.plan.note}")

    with run.stage("checks", record) as staging, reporter.stage("checks") as advance:
        vectors.advance = advance
        table, report = _compute(run, preds, probs, train_set, vectors, params, record, say)
        if sft_train is not None:
            _contamination(run, table, report, sft_train, params, say, advance)
        staging.write_parquet(CHECKS, table[list(schemas.CHECKS.columns)])
        staging.write_json(CHECKS_JSON, report)
        summary = checks_report.summary(report)
        staging.facts.update({k: v for k, v in summary.items() if k != "findings"})
    return summary


def _checks_on_ray(run, params: CheckParams, embed, engine, reporter, train_set=None) -> dict:
    """The checks of a run on Ray workers (`erroranalysis.stages.data_checks_ray`)."""
    from erroranalysis.embed import choice as embedder_choice
    from erroranalysis.engines.blocks import n_rows, plan
    from erroranalysis.stages.data_checks_ray import Embedding, checks_ray

    n = n_rows(plan(inputs.for_workers(run, rundir.PREDICTIONS, engine)))  # a local run: every node sees it
    # a generation run's training file is SFT rows: contamination (`contamination_ray`), not leakage and shift
    contaminated = run.task == "generation" and train_set is None and params.train is not None
    trained = (train_set is not None or params.train is not None) and not contaminated
    if trained and embed is None and params.embedder == "auto" and n <= embedder_choice.MINILM_MAX_ROWS:  # both sets
        from erroranalysis.stages.check_ray_train import count_rows

        n += count_rows(params, train_set, engine)
    if embed is not None:
        vector_plan = embedder_choice.Plan(getattr(embed, "__name__", "custom"))
        embedding = Embedding(vector_plan.source, fn=embed)
    else:
        vector_plan = embedder_choice.plan(params.embedder, has_hidden=readers.usable(run, rundir.HIDDEN), n_rows=n,
                                           uses=("label_issues", "duplicates", "leakage", "shift"))
        if vector_plan.source == "none":
            embedding = None
        elif vector_plan.source == "hidden":
            embedding = Embedding("hidden", hidden=str(readers.shared_path(run, rundir.HIDDEN)))
        else:
            embedder = embedder_choice.text_embedder(vector_plan.source)
            if hasattr(embedder, "build_with"):  # a first distillation on a worker: it peaks near 1 GB
                embedder.build_with(lambda fn, **kwargs: call_on_worker(fn, engine, **kwargs))
            name = vector_plan.source if vector_plan.source in embedder_choice.NAMES else str(
                getattr(embedder, "key", vector_plan.source))
            embedding = Embedding(name, embedder=embedder)
    record = {**params.record(), "train": None, "embedder": embedding.source if embedding else "none",
              "vectors": vector_plan.record(), "shift": params.shift and trained}
    if vector_plan.note:
        reporter.note(f"checks: {vector_plan.note}")
    vote = embedding is not None and vector_plan.uses("label_issues") and params.label_issue_neighbors > 0
    if contaminated:
        from erroranalysis.stages.contamination_ray import prepare

        contamination = prepare(run, params, engine, reporter)
        record["train"] = contamination.train
        try:
            return checks_ray(run, params, record, embedding, vote, engine, reporter, contamination=contamination)
        finally:
            contamination.close()
    train = {"set": train_set, "domain": vector_plan.uses("shift")} if trained else None
    return checks_ray(run, params, record, embedding, vote, engine, reporter, train)


def _contamination(run, table, report, train, params: CheckParams, say, advance) -> None:
    from erroranalysis.stages.contamination import add_section, contamination_checks, set_columns

    columns, section = contamination_checks(run, train, params, say, advance)
    set_columns(table, columns)
    add_section(report, section)


def _check_probs(run, preds, probs) -> None:
    labels = run.labels
    if probs is not None and len(labels) >= 2 and len(preds) and run.task == "classification":
        from erroranalysis.datachecks.label_issues import validate

        validate(preds["label"].to_numpy(dtype=object), np.asarray(probs), labels,
                 source=str(run.file(rundir.PROBS)))  # NaN or unknown labels fail here, before the stage starts


def _compute(run, preds, probs, train_set, vectors: "_Vectors", params: CheckParams, record: dict,
             say) -> tuple[Any, dict]:
    texts = preds["text"].tolist()
    gold = preds["label"].to_numpy(dtype=object)
    ids = preds["example_id"].to_numpy(dtype=object)
    report: dict = {"n_examples": len(preds), "params": record}
    table = pd.DataFrame({"example_id": ids})

    eval_vectors = train_vectors = None
    near = vectors.source != "none"
    if near:
        say(f"vectors of {len(texts)} eval texts ({vectors.source})")
        eval_vectors = vectors.eval(texts)
        if train_set is not None:
            say(f"vectors of {len(train_set)} train texts ({vectors.source})")
            train_vectors = vectors.train(train_set.frame["text"].tolist())

    say("label issues")
    issues = _label_issues(gold, probs, run.labels, params, run,
                           eval_vectors if vectors.plan.uses("label_issues") else None)
    for column in ("label_issue_score", "label_issue", "suggested_label"):
        table[column] = issues[column].to_numpy()
    report["label_issues"] = checks_report.label_issue_summary(
        issues, ids, gold, preds["correct"].to_numpy(), probs, params.label_issue_method, params.filter_by)
    if run.task == "regression":
        report["label_issues"] = checks_report.label_issues_skipped(run.task, probs is not None)
    report["label_issues"]["neighbors"] = None if eval_vectors is None or not params.label_issue_neighbors or \
        not vectors.plan.uses("label_issues") or not report["label_issues"]["available"] or \
        run.task == "multilabel" else {  # the vote joins classification label issues only
        "weight": params.label_issue_neighbors, "k": params.label_issue_k, "vectors": vectors.source}

    say("duplicates")
    _duplicates(table, report, texts, gold, ids, eval_vectors, near, params)
    no_leakage(table, report)
    if train_set is not None:
        say("leakage")
        train_labels = _train_labels(train_set.frame["label"].astype(str).to_numpy(dtype=object),
                                     TrainGold.of(run).id_labels)
        _leakage(table, report, texts, gold, ids, train_set, train_labels, eval_vectors, train_vectors,
                 near, params)
        if params.shift:
            say("distribution shift")
            report["shift"] = _shift(train_set, train_labels, texts, gold, ids, train_vectors, eval_vectors,
                                     near and vectors.plan.uses("shift"), params.seed)
    report["findings"] = [f.to_dict() for f in checks_report.checks_findings(report)]
    return table, report


def _duplicates(table, report, texts, gold, ids, vectors, near: bool, params: CheckParams) -> None:
    from erroranalysis.datachecks.duplicates import duplicate_summary, find_duplicates

    dups = find_duplicates(texts, gold, embeddings=vectors, near=near, threshold=params.near_threshold,
                           k=params.neighbors, block_size=params.block_size)
    for column in ("duplicate_group", "duplicate_kind", "duplicate_conflict"):
        table[column] = dups[column].to_numpy()
    report["duplicates"] = {"near": near, "threshold": params.near_threshold, **duplicate_summary(dups, ids, gold)}


def _leakage(table, report, texts, gold, ids, train_set, train_labels, eval_vectors, train_vectors, near: bool,
             params: CheckParams) -> None:
    from erroranalysis.datachecks.duplicates import find_leakage

    leak = find_leakage(texts, train_set.frame["text"].tolist(), eval_labels=gold, train_labels=train_labels,
                        eval_embeddings=eval_vectors, train_embeddings=train_vectors, near=near,
                        threshold=params.near_threshold, block_size=params.block_size)
    hit = leak["in_train"].to_numpy()
    train_ids = train_set.frame["example_id"].astype(str).to_numpy(dtype=object)
    table["in_train"] = pd.array(hit, dtype="boolean")
    table["train_id"] = pd.array(np.where(hit, train_ids[np.maximum(leak["train_index"].to_numpy(), 0)], None),
                                 dtype="string")
    table["train_similarity"] = leak["train_similarity"].to_numpy(dtype=np.float32)
    table["train_label_differs"] = pd.array(leak["train_label_differs"].to_numpy(), dtype="boolean")
    report["leakage"] = checks_report.leakage_summary(leak, ids, gold, train_ids, train_labels, train_set, near)


def _shift(train_set, train_labels, texts, gold, ids, train_vectors, eval_vectors, near: bool, seed: int) -> dict:
    from erroranalysis.datachecks.shift import shift_report

    shifted = shift_report(train_set.frame["text"].tolist(), texts, train_labels=train_labels, eval_labels=gold,
                           train_embeddings=train_vectors, eval_embeddings=eval_vectors, domain_classifier=near,
                           seed=seed)
    domain = shifted.get("domain")
    if domain and domain.get("least_like_train"):
        for row in domain["least_like_train"]:
            row["example_id"] = str(ids[row["eval_index"]])
    return shifted


def _train_labels(values: np.ndarray, labels: list[str]) -> np.ndarray:
    """Train labels as class names: integer ids into the run's labels are mapped when no value is a name."""
    from erroranalysis.datachecks.train_blocks import class_names, ids_are_labels, label_votes

    return class_names(values, labels, ids_are_labels([label_votes(values, labels)], labels))


class _Vectors:
    """The check vectors of a run, by the one rule `embedder_choice.plan`: eval rows from hidden_states.npy (or a
    text embedder), train texts through the same model (the run's checkpoint, or the text embedder)."""

    def __init__(self, source: str, eval_fn: Callable | None, train_fn: Callable | None, reports: bool = False,
                 plan=None):
        from erroranalysis.embed.choice import Plan

        self.source, self._eval, self._train = source, eval_fn, train_fn
        self.plan = plan if plan is not None else Plan(source)
        self.reports = reports  # the functions take progress=(done, total): rows embedded show in the log
        self.advance: Callable[[int], None] | None = None  # a Reporter stage's advance(rows)

    def eval(self, texts: list[str]) -> np.ndarray:
        return np.asarray(self._call(self._eval, texts), dtype=np.float32)

    def train(self, texts: list[str]) -> np.ndarray:
        return np.asarray(self._call(self._train, texts), dtype=np.float32)

    def _call(self, function, texts):
        if self.reports and self.advance:
            return function(texts, progress=_cumulative(self.advance))
        return function(texts)

    @classmethod
    def custom(cls, embed: Callable) -> "_Vectors":
        return cls(getattr(embed, "__name__", "custom"), embed, embed)

    @classmethod
    def of(cls, run, choice: str, engine=None, n_rows: int = 0) -> "_Vectors":
        from erroranalysis.embed import choice as embedder_choice

        plan = embedder_choice.plan(choice, has_hidden=readers.usable(run, rundir.HIDDEN), n_rows=n_rows,
                                    uses=("label_issues", "duplicates", "leakage", "shift"))
        if plan.source == "none":
            return cls("none", None, None, plan=plan)
        if plan.source == "hidden":
            states = readers.read_hidden(run)
            return cls("hidden", lambda texts: states, checkpoint_embed(run), plan=plan)
        # fails before the stage starts when the model is missing
        embedder = embedder_choice.text_embedder(plan.source)
        embed, reports = _text_embed(embedder, engine)
        name = plan.source if plan.source in embedder_choice.NAMES else str(getattr(embedder, "key", plan.source))
        return cls(name, embed, embed, reports, plan=plan)


def _text_embed(embedder, engine) -> tuple[Callable, bool]:
    from erroranalysis.embed.models import MiniLMEmbedder

    # the static model embeds ~10,000 texts/s in-process: shipping them to Ray would cost more than it saves
    if engine is not None and engine.distributed and isinstance(embedder, MiniLMEmbedder):
        from erroranalysis.engines import ray_data

        return (lambda texts: ray_data.embed_texts(list(texts), embedder, engine)), False
    return embedder.embed_texts, True


def _cumulative(advance: Callable[[int], None]) -> Callable[[int, int], None]:
    """A (done, total) callback over a Reporter's advance(n), which counts increments."""
    seen = {"done": 0}

    def progress(done: int, total: int) -> None:
        if done > seen["done"]:
            advance(done - seen["done"])
            seen["done"] = done

    return progress


def check_vectors(run_dir: str | Path, embedder: str = "auto", *, engine=None) -> tuple[np.ndarray | None, str]:
    """The check vectors of a run's eval rows (predictions order) and where they come from ("hidden", "static",
    "minilm", a folder's key, or "none": then None), by the rule every check shares (`embedder_choice.plan`). For
    signals that need neighbours of every example, such as the neighbour-based label-issue score."""
    run = rundir.Run.open(run_dir)
    texts = readers.read_predictions(run, columns=["text"])["text"].tolist()
    vectors = _Vectors.of(run, embedder, engine, len(texts))
    if vectors.source == "none":
        return None, "none"
    return vectors.eval(texts), vectors.source


def _label_issues(gold, probs, labels, params: CheckParams, run, vectors=None) -> pd.DataFrame:
    """Label-issue scores: the model's out-of-sample probabilities, joined (with `label_issue_neighbors`) by the
    labels of each example's neighbours in the check vectors, a signal the model's softmax does not give."""
    n = len(gold)
    if run.task == "multilabel" and probs is not None and n:
        return _multilabel_issues(run, probs, params)
    if probs is None or len(labels) < 2 or n == 0 or run.task == "regression":
        return pd.DataFrame({"label_issue_score": np.full(n, np.nan, dtype=np.float32),
                             "label_issue": pd.array([None] * n, dtype="boolean"),
                             "suggested_label": pd.array([None] * n, dtype="string")})
    from erroranalysis.datachecks.label_issues import find_label_issues

    found = find_label_issues(gold, np.asarray(probs), labels, method=params.label_issue_method,
                              filter_by=params.filter_by, source=str(run.file(rundir.PROBS)), vectors=vectors,
                              knn_weight=params.label_issue_neighbors, k=params.label_issue_k, seed=params.seed)
    found["label_issue"] = pd.array(found["label_issue"].to_numpy(), dtype="boolean")
    found["suggested_label"] = pd.array(found["suggested_label"].astype(str).to_numpy(), dtype="string")
    return found


def _multilabel_issues(run, probs, params: CheckParams) -> pd.DataFrame:
    """cleanlab's multi-label confident learning over the run's sigmoids and gold sets."""
    from erroranalysis.datachecks.multilabel_issues import find_multilabel_issues
    from erroranalysis.stages.metrics import gold_matrix

    gold = gold_matrix(readers.read_predictions(run, columns=["gold_labels"]), "gold_labels", run.labels)
    found = find_multilabel_issues(gold, np.asarray(probs), run.labels, method=params.label_issue_method,
                                   filter_by=params.filter_by)
    found["label_issue"] = pd.array(found["label_issue"].to_numpy(), dtype="boolean")
    found["suggested_label"] = pd.array(found["suggested_label"].astype(str).to_numpy(), dtype="string")
    return found


def label_issue_share(checks: pd.DataFrame, example_ids: Sequence[str]) -> float:
    """Share of `example_ids` flagged as probable label issues in `checks` (checks.parquet); NaN when none of
    them has a flag (no checks for them, or the run had no probabilities). For the per-cluster diagnostic
    "probably mislabeled"."""
    wanted = pd.Index([str(i) for i in example_ids])
    if not len(wanted) or "label_issue" not in checks.columns:
        return math.nan
    flags = checks.loc[checks["example_id"].astype(str).isin(wanted), "label_issue"].dropna()
    return float(flags.astype(bool).mean()) if len(flags) else math.nan
