"""Multi-label, regression and token-classification metrics from per-block partials (`metrics.task_partials`,
`tokens.sentence_counts`): merged over random splits of the rows they give the whole-table `compute_*_metrics`
byte for byte (json), and the metrics stage gives the same metrics.json under a local Ray as in this process."""

from __future__ import annotations

import json
import random

import numpy as np
import pandas as pd
import pytest

from erroranalysis.infer.predictions import bin_labels, bin_names, quantile_edges
from erroranalysis.metrics import multilabel as ml
from erroranalysis.metrics import task_partials as tp
from erroranalysis.metrics.partials import LIST
from erroranalysis.metrics.regression import compute_regression_metrics
from erroranalysis.metrics.tokens import (
    add_counts,
    compute_token_metrics,
    sentence_counts,
    token_metrics_from_counts,
)

KINDS = {"tags": LIST}


def metadata(rng, n: int) -> pd.DataFrame:
    """A column for every bucket rule: a few strings, many floats with missing cells, an int with missing cells,
    tags as lists."""
    price = np.round(rng.gamma(2, 50, n), 1)
    price[rng.random(n) < 0.1] = np.nan
    stars = pd.array(rng.integers(1, 4, n), dtype="Int64")
    stars[rng.random(n) < 0.1] = pd.NA
    tag_sets = [["x"], ["y"], ["x", "y"], [], ["z", "x"]]
    return pd.DataFrame({"channel": np.asarray(["web", "app", "mail"], dtype=object)[rng.integers(0, 3, n)],
                         "price": price, "stars": stars,
                         "tags": [tag_sets[i] for i in rng.integers(0, len(tag_sets), n)]})


def splits(rng, n: int, blocks: int) -> list[tuple[int, int]]:
    cuts = np.r_[0, np.sort(rng.choice(np.arange(1, n), blocks - 1, replace=False)), n]
    return list(zip(cuts[:-1].tolist(), cuts[1:].tolist()))


def two_passes(n: int, meta: pd.DataFrame, texts, cuts, first, row_stats) -> tuple[dict, dict, dict]:
    """What the stage does over blocks: pass 1 merged, the buckets, pass 2 merged."""
    def block(a, b):
        return meta.iloc[a:b].reset_index(drop=True), texts[a:b]

    merged = None
    for a, b in cuts:
        m, x = block(a, b)
        merged = tp.merge(merged, first(a, b, tp.metadata_values(m, x, KINDS, a)))
    rules, aside = tp.bucket_rules(merged.pop("values"), 20)
    assert not aside
    sums = None
    for a, b in cuts:
        m, x = block(a, b)
        sums = tp.merge(sums, tp.metadata_sums(m, x, KINDS, rules, *row_stats(a, b)))
    return merged, rules, sums


def dumps(result: dict) -> str:
    return json.dumps(result, sort_keys=False)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_multilabel_partials_merge_to_the_whole_table_metrics(seed):
    rng = np.random.default_rng(seed)
    n, k = 400, 4
    t = (rng.random((n, k)) < 0.3).astype(np.int64)
    probs = np.clip(t * 0.5 + rng.random((n, k)) * 0.6, 0, 1).astype(np.float32).astype(np.float64)
    p = (probs >= 0.5).astype(np.int64)
    labels = [f"l{j}" for j in range(k)]
    meta, texts = metadata(rng, n), np.asarray([" ".join(["w"] * int(i)) for i in rng.integers(0, 30, n)])
    whole = ml.compute_multilabel_metrics(t, p, labels, probs=probs, metadata=meta, texts=texts, n_resamples=200,
                                          seed=seed, thresholds=[0.5] * k)
    for blocks in (1, 3, 7):
        cuts = splits(rng, n, blocks)
        merged, rules, sums = two_passes(
            n, meta, texts, cuts, lambda a, b, v: ml.multilabel_first(t[a:b], p[a:b], probs[a:b], 15, v),
            lambda a, b: (tp.multilabel_row_stats(t[a:b], p[a:b]), np.zeros((b - a, 0))))
        result = ml.finish_multilabel(merged, labels, tp.finish_by_metadata(rules, sums, tp.multilabel_describe(k)),
                                      ranking=[ml.ranking(t[:, j], probs[:, j]) for j in range(k)],
                                      thresholds=[0.5] * k, n_resamples=200, seed=seed)
        assert dumps(result) == dumps(whole), blocks
    assert {"channel", "price", "stars", "tags", "text_length"} == set(whole["by_metadata"])


def test_multilabel_whole_table_agrees_with_sklearn_and_numpy():
    """The exact sums behind the samples averages and the calibration give what scikit-learn and numpy give."""
    from sklearn import metrics as skm

    rng = np.random.default_rng(5)
    t = (rng.random((300, 3)) < 0.4).astype(np.int64)
    probs = rng.random((300, 3))
    p = (probs >= 0.5).astype(np.int64)
    m = ml.compute_multilabel_metrics(t, p, ["a", "b", "c"], probs=probs, n_resamples=0)
    pr, rc, f1, _ = skm.precision_recall_fscore_support(t, p, average="samples", zero_division=0)
    o = m["overall"]
    assert (o["samples_precision"], o["samples_recall"], o["samples_f1"]) == pytest.approx((pr, rc, f1), rel=1e-12)
    assert o["brier"] == pytest.approx(np.mean((probs - t) ** 2), rel=1e-12)
    edges = np.linspace(0, 1, 16)
    first = probs[:, 0][(probs[:, 0] > edges[3]) & (probs[:, 0] <= edges[4])]
    assert m["calibration"]["per_label"][0]["bins"][3]["confidence"] == pytest.approx(first.mean(), rel=1e-12)


def test_multilabel_bootstrap_resamples_rows():
    """Drawing the (gold, predicted) patterns' counts is resampling rows: the interval brackets the estimate and
    shrinks with more rows."""
    rng = np.random.default_rng(0)
    widths = []
    for n in (200, 5000):
        t = (rng.random((n, 3)) < 0.4).astype(np.int64)
        p = np.where(rng.random((n, 3)) < 0.8, t, 1 - t)
        ci = ml.bootstrap(ml.row_patterns(t, p), 3, 400, 0)
        exact = (t == p).all(axis=1).mean()
        assert ci["subset_accuracy"][0] < exact < ci["subset_accuracy"][1]
        widths.append(ci["subset_accuracy"][1] - ci["subset_accuracy"][0])
    assert widths[1] < widths[0] / 3


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_regression_partials_merge_to_the_whole_table_metrics(seed):
    from erroranalysis.metrics.regression import order_stats, regression_result

    rng = np.random.default_rng(seed)
    n = 500
    t = rng.normal(size=n) * 3
    p = t + rng.normal(scale=0.5, size=n) + (np.arange(n) % 5 == 0)
    ok = np.abs(p - t) <= 0.6
    edges = quantile_edges(t, 4)
    labels = bin_labels(edges)
    label, pred = np.asarray(bin_names(t, edges), dtype=object), np.asarray(bin_names(p, edges), dtype=object)
    meta, texts = metadata(rng, n), np.asarray([" ".join(["w"] * int(i)) for i in rng.integers(0, 30, n)])
    tolerance = {"tolerance": 0.6, "relative": False, "rule": "--tolerance"}
    whole = compute_regression_metrics(t, p, ok, label, pred, labels, metadata=meta, texts=texts,
                                       tolerance=tolerance, n_resamples=100, seed=seed)
    for blocks in (1, 4, 9):
        merged, rules, sums = two_passes(
            n, meta, texts, splits(rng, n, blocks),
            lambda a, b, v: tp.regression_first(t[a:b], p[a:b], ok[a:b], label[a:b], pred[a:b], labels, v),
            lambda a, b: tp.regression_row_stats(t[a:b], p[a:b], ok[a:b]))
        result = regression_result(merged["n"], merged["failures"], order_stats(t, p, 100, seed),
                                   tp.finish_regression_bins(merged["bins"], labels),
                                   tp.finish_by_metadata(rules, sums, tp.regression_describe),
                                   tolerance=tolerance, n_resamples=100, seed=seed)
        assert dumps(result) == dumps(whole), blocks
    # the exact means are numpy's up to its rounding
    web = np.asarray(meta["channel"] == "web")
    row = next(r for r in whole["by_metadata"]["channel"] if r["value"] == "web")
    assert row["mae"] == pytest.approx(np.abs(p - t)[web].mean(), rel=1e-12)
    assert whole["per_class"][0]["bias"] == pytest.approx((p - t)[label == labels[0]].mean(), rel=1e-12)


def test_token_counts_merge_to_the_whole_table_metrics():
    from token_fixtures import sentence

    rng, pyrng = np.random.default_rng(0), random.Random(0)
    gold = [sentence(pyrng, i)["tags"] for i in range(60)]
    pred = [[t.replace("PER", "ORG") if i % 3 == 0 else ("O" if j == 0 and i % 4 == 0 else t) for j, t in
             enumerate(tags)] for i, tags in enumerate(gold)]
    ok = [g == q for g, q in zip(gold, pred)]
    kinds = [["missed", "wrong_type", "correct"][i % 3] for i in range(90)]
    kind_types = [["PER", "LOC", "ORG"][i % 3] for i in range(90)]
    types = ["LOC", "ORG", "PER"]
    whole = compute_token_metrics(gold, pred, "IOB2", types, "strict", kinds, kind_types, ok)
    from collections import Counter

    for blocks in (1, 5):
        counts = None
        for a, b in splits(rng, 60, blocks):
            part = sentence_counts(gold[a:b], pred[a:b], "IOB2", types, ok[a:b])
            counts = part if counts is None else add_counts(counts, part)
        spans = Counter()
        for a, b in splits(rng, 90, 4):
            spans += Counter(zip(kind_types[a:b], kinds[a:b]))
        assert dumps(token_metrics_from_counts(counts, spans, "IOB2", types, "strict")) == dumps(whole)
    assert whole["overall"]["n_failures"] > 0 and whole["error_kinds"]["wrong_type"] == 30


# ------------------------------------------------------------------------------------------------ the stage

BLOCK = 41  # rows per block: several blocks, the last one short


@pytest.fixture
def small_blocks(monkeypatch):
    import erroranalysis.engines.blocks as blocks

    monkeypatch.setattr(blocks, "ROWS_PER_BLOCK", BLOCK)
    monkeypatch.setattr(blocks.map_blocks, "__kwdefaults__", {**blocks.map_blocks.__kwdefaults__,
                                                              "rows_per_block": BLOCK})


def task_rows(task: str, n: int = 160, seed: int = 0) -> list[dict]:
    """Predictions made elsewhere for `task`, with metadata for every bucket rule."""
    from test_metrics_blocks import planted_rows
    from token_fixtures import sentence

    r = random.Random(seed)
    rows = []
    for i, base in enumerate(planted_rows(n, seed)):
        meta = {key: base[key] for key in ("id", "text", "shop", "price", "stars", "promo", "tags")}
        if task == "multilabel":
            gold = sorted(r.sample(["a", "b", "c"], r.randint(0, 2)))
            meta.update(label=gold, **{f"prob_{x}": min(1.0, r.random() * 0.7 + 0.4 * (x in gold)) for x in "abc"})
        elif task == "regression":
            target = r.gauss(0, 3)
            meta.update(label=target, pred=target + r.gauss(0, 1) + (i % 7 == 0) * 3)
        else:
            s = sentence(r, i)
            pred = [t.replace("PER", "ORG") if i % 3 == 0 else t for t in s["tags"]]
            meta = {"id": meta["id"], "shop": meta["shop"], "tokens": s["tokens"], "tags": s["tags"],
                    "pred_tags": pred}
        rows.append(meta)
    return rows


def task_run(tmp_path, task: str):
    from conftest import write_jsonl

    from erroranalysis import stages
    from erroranalysis.sources.table import DataOptions
    from erroranalysis.stages.after import AfterParams
    from erroranalysis.tasks import TaskParams

    options = TaskParams(tolerance=1.5) if task == "regression" else TaskParams()
    path = write_jsonl(tmp_path / f"{task}.jsonl", task_rows(task))
    return stages.analyze(task, path, tmp_path / task, stages.Reading(data=DataOptions(id_column="id"),
                                                                      task=options),
                          after=AfterParams.with_seed(0, checks=False, slices=False, cluster=False))


def metrics_text(run, engine=None) -> str:
    from erroranalysis import stages
    from erroranalysis.rundir import readers

    stages.compute_run_metrics(run, stages.MetricsParams(seed=0, n_resamples=200), engine=engine)
    return readers.artifact_path(run, "metrics.json").read_text(encoding="utf-8")


def whole_table(run) -> dict:
    """metrics.json as the stage computed it before it counted blocks: every row read at once."""
    from erroranalysis.infer.predictions import bin_labels
    from erroranalysis.rundir import readers
    from erroranalysis.stages.common import metadata_of
    from erroranalysis.stages.metrics import _tolerance, gold_matrix

    preds = readers.read_predictions(run)
    meta = preds[metadata_of(run, preds.columns)]
    texts = preds["text"].to_numpy()
    params = run.manifest.get("task_params") or {}
    if run.task == "multilabel":
        result = ml.compute_multilabel_metrics(
            gold_matrix(preds, "gold_labels", run.labels), gold_matrix(preds, "pred_labels", run.labels),
            run.labels, probs=np.asarray(readers.read_probs(run)), metadata=meta, texts=texts,
            thresholds=params.get("thresholds"), seed=0, n_resamples=200)
    elif run.task == "regression":
        result = compute_regression_metrics(
            preds["target"].to_numpy(), preds["prediction"].to_numpy(), preds["correct"].to_numpy(),
            preds["label"].to_numpy(), preds["pred"].to_numpy(), bin_labels(params["edges"]), metadata=meta,
            texts=texts, tolerance=_tolerance(run, params), seed=0, n_resamples=200)
    else:
        setup = run.manifest["tokens"]
        spans = readers.read_spans(run, columns=["kind", "gold_type", "pred_type"])
        result = compute_token_metrics(
            [list(t) for t in preds["gold_tags"]], [list(t) for t in preds["pred_tags"]], setup["scheme"],
            setup["types"], setup["span_mode"], spans["kind"].tolist(),
            [g if isinstance(g, str) else p for g, p in zip(spans["gold_type"], spans["pred_type"])],
            preds["correct"].to_numpy())
    return json.loads(json.dumps(result))


@pytest.mark.parametrize("task", ["multilabel", "regression", "token-classification"])
def test_the_stage_gives_the_whole_table_metrics(tmp_path, small_blocks, task):
    from erroranalysis.rundir import readers

    run = task_run(tmp_path, task)
    assert readers.n_predictions(run) > 3 * BLOCK
    result = json.loads(metrics_text(run))
    assert result == whole_table(run)
    if task != "token-classification":
        assert {"shop", "price", "stars", "promo", "tags", "text_length"} <= set(result["by_metadata"])
        assert result["by_metadata"]["shop"][-1]["value"] == "(other)"
        assert result["per_class"] and result["overall"]["accuracy_ci" if task == "multilabel" else "mae_ci"]
    if task == "multilabel":
        assert result["calibration"]["per_label"] and result["per_class"][0]["roc_auc"] is not None
    if task == "regression":
        assert result["per_class"][0]["mae"] is not None and result["overall"]["spearman"] is not None
    if task == "token-classification":
        assert result["error_kinds"]["wrong_type"] > 0


def test_ray_gives_the_same_metrics_json(tmp_path, small_blocks, local_ray):
    from erroranalysis.engines import Engine

    for task in ("multilabel", "regression", "token-classification"):
        run = task_run(tmp_path, task)
        assert metrics_text(run, Engine("ray")) == metrics_text(run), task


def rewritten(run, out, edit):
    """A copy of `run` with predictions.parquet edited (`edit(frame)`): what an edited or damaged run holds."""
    from erroranalysis import rundir
    from erroranalysis.rundir import create_run, readers

    frame = readers.read_predictions(run)
    edit(frame)
    keep = {key: run.manifest[key] for key in ("task", "labels", "seed", "data", "task_params") if key in run.manifest}
    with create_run(out, overwrite=True, **keep) as copy:
        with copy.stage("load_predictions", {}) as staging:
            staging.write_parquet(rundir.PREDICTIONS, frame)
            if readers.artifact_path(run, rundir.PROBS, required=False) is not None:
                staging.write_npy(rundir.PROBS, np.asarray(readers.read_probs(run)))
    return copy


def test_a_bad_cell_in_a_block_is_the_same_one_line_error_under_both_engines(tmp_path, small_blocks, local_ray):
    from erroranalysis import stages
    from erroranalysis.core.errors import DataError
    from erroranalysis.engines import Engine

    def nan_target(frame):
        frame.loc[150, "target"] = np.nan

    def unknown_label(frame):
        frame.at[97, "gold_labels"] = ["a", "yak"]

    for task, edit, expected in (("regression", nan_target, "target row 150 is nan"),
                                 ("multilabel", unknown_label, "gold_labels row 97 holds 'yak'")):
        run = rewritten(task_run(tmp_path, task), tmp_path / f"bad-{task}", edit)
        errors = []
        for engine in (None, Engine("ray")):
            with pytest.raises(DataError) as caught:
                stages.compute_run_metrics(run, engine=engine)
            errors.append(str(caught.value))
        assert errors[0] == errors[1] and errors[0].startswith(expected), errors
        assert "\n" not in errors[0] and not (run.path / "metrics.json").exists()


def test_a_bad_sigmoid_names_its_row():
    from erroranalysis.core.errors import DataError

    t = np.zeros((5, 2), dtype=np.int64)
    probs = np.full((5, 2), 0.2)
    probs[3, 1] = np.nan
    with pytest.raises(DataError, match=r"^probs row 103 has NaN or inf"):
        ml.multilabel_first(t, t, probs, 15, {}, offset=100)


@pytest.mark.parametrize("task", ["classification", "multilabel", "regression", "token-classification"])
@pytest.mark.parametrize("column", ["correct", "example_id"])
def test_a_missing_correct_or_id_is_the_readers_one_line_error(tmp_path, small_blocks, task, column):
    """The blocks would read a missing `correct` as False (a failure) and go on: the stage refuses it first, with
    `readers.read_predictions`' error, from the footers' counts (whichever engine runs the blocks)."""
    from test_metrics_blocks import analyzed

    from erroranalysis import stages
    from erroranalysis.core.errors import RunError

    def missing(frame):
        frame[column] = frame[column].astype(object)
        frame.loc[[3, 90], column] = None  # in the first and the third block

    source = analyzed(tmp_path, task) if task == "classification" else task_run(tmp_path, task)
    run = rewritten(source, tmp_path / "edited", missing)
    with pytest.raises(RunError) as caught:
        stages.compute_run_metrics(run)
    assert str(caught.value) == (f"{run.path / 'predictions.parquet'}, column '{column}': 2 "
                                 + ("missing values; run the stage that writes predictions again." if column ==
                                    "correct" else "missing ids; every example needs one."))
    assert not (run.path / "metrics.json").exists()
