"""Metrics from per-block partial aggregates: merged over any split of the rows, exactly compute_metrics of all rows."""

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from erroranalysis.core.counted import quantiles as counted_quantiles
from erroranalysis.core.errors import DataError
from erroranalysis.metrics import compute_metrics, partials
from erroranalysis.metrics.partials import LIST, block_partial, finish, merge

LABELS = ["ant", "bee", "cat", "dog"]


def planted(n: int = 400, seed: int = 0) -> tuple[pa.Table, np.ndarray]:
    """A predictions-like table with the metadata that makes buckets hard: a categorical column with more values
    than max_metadata_values and tied counts, a many-valued numeric column with ties and missing cells, an integer
    column with missing cells (floats once read), booleans with and without missing cells, a list column with empty
    and missing cells, texts with missing ones, a column named text_length; and float32 probabilities."""
    rng = np.random.default_rng(seed)
    label = rng.choice(LABELS, n)
    pred = np.where(rng.random(n) < 0.6, label, rng.choice(LABELS, n))
    num = np.round(rng.normal(size=n) * 10, 1)
    num[rng.random(n) < 0.1] = np.nan
    few = [None if rng.random() < 0.1 else int(v) for v in rng.integers(0, 5, n)]
    tags = [None if r < 0.1 else [] if r < 0.2 else list(rng.choice(["x", "y", "z", "w"], rng.integers(1, 4)))
            for r in rng.random(n)]
    words = ["alpha", "beta", "gamma", "delta"]
    text = [None if rng.random() < 0.05 else " ".join(rng.choice(words, rng.integers(0, 40))) for _ in range(n)]
    logits = rng.normal(size=(n, len(LABELS))) * 3
    probs = (np.exp(logits) / np.exp(logits).sum(1, keepdims=True)).astype(np.float32)
    table = pa.table({
        "label": label, "pred": pred, "text": pa.array(text, pa.string()),
        "cat": [f"c{int(v)}" for v in rng.integers(0, 30, n)],
        "num": num, "few": pa.array(few, pa.int64()),
        "flag": pa.array([None if rng.random() < 0.1 else bool(v) for v in rng.integers(0, 2, n)], pa.bool_()),
        "solid": rng.random(n) < 0.5, "tags": pa.array(tags, pa.list_(pa.string())),
        "text_length": rng.integers(0, 3, n), "empty": pa.array([None] * n, pa.string()),
    })
    return table, probs


METADATA = ["cat", "num", "few", "flag", "solid", "tags", "text_length", "empty"]


def frame_of(table: pa.Table) -> pd.DataFrame:
    """A table as the run's reader gives it: label, pred and text as strings."""
    frame = table.to_pandas()
    frame["text"] = frame["text"].fillna("").astype(str)
    frame["label"], frame["pred"] = frame["label"].astype(str), frame["pred"].fillna("").astype(str)
    return frame


def whole(table: pa.Table, probs, **options) -> dict:
    frame = frame_of(table)
    return compute_metrics(frame["label"].to_numpy(), frame["pred"].to_numpy(), LABELS, probs=probs,
                           metadata=frame[METADATA], texts=frame["text"].to_numpy(), **options)


def by_blocks(table: pa.Table, probs, cuts, **options) -> dict:
    merged = None
    bounds = [0, *cuts, table.num_rows]
    for start, stop in zip(bounds, bounds[1:]):
        frame = frame_of(table.slice(start, stop - start))  # each block read alone, as a worker reads it
        part = block_partial(frame["label"].to_numpy(), frame["pred"].to_numpy(), LABELS,
                             probs=None if probs is None else probs[start:stop], metadata=frame[METADATA],
                             texts=frame["text"].to_numpy(), kinds={"tags": LIST}, offset=start)
        merged = part if merged is None else merge(merged, part)
    result, set_aside = finish(merged, LABELS, **options)
    assert set_aside == []
    return result


def splits(n: int, seed: int):
    rng = np.random.default_rng(seed)
    yield []
    yield list(range(1, 60))  # one row per block, then the rest in one
    for _ in range(4):
        yield sorted(set(rng.integers(1, n, rng.integers(1, 12)).tolist()))


@pytest.mark.parametrize("with_probs", [True, False])
def test_merged_blocks_give_compute_metrics_exactly(with_probs):
    table, probs = planted()
    probs = probs if with_probs else None
    expected = json.dumps(whole(table, probs, n_resamples=50))
    for cuts in splits(table.num_rows, 1):
        assert json.dumps(by_blocks(table, probs, cuts, n_resamples=50)) == expected, cuts


def test_the_planted_columns_take_every_bucket_rule():
    table, probs = planted()
    result = by_blocks(table, probs, [97, 250], n_resamples=0)["by_metadata"]
    assert [r["value"] for r in result["cat"]][-1] == "(other)" and len(result["cat"]) == 21
    assert result["num"][0]["value"].startswith("[") and result["num"][-1]["value"] == "(missing)"
    assert [r["value"] for r in result["few"]] == ["0.0", "1.0", "2.0", "3.0", "4.0", "(missing)"]  # floats once read
    assert [r["value"] for r in result["solid"]] == ["False", "True"]
    assert {r["value"] for r in result["tags"]} == {"x", "y", "z", "w", "(missing)"}
    assert "meta_text_length" in result and result["text_length"][0]["value"].startswith("[")
    assert [r["value"] for r in result["empty"]] == ["(missing)"]


def test_a_column_past_the_bound_is_set_aside(monkeypatch):
    monkeypatch.setattr(partials, "MAX_DISTINCT", 25)
    table, probs = planted(200)
    frame = frame_of(table)
    parts = [block_partial(frame["label"][a:b].to_numpy(), frame["pred"][a:b].to_numpy(), LABELS,
                           metadata=frame[["cat", "few"]][a:b].reset_index(drop=True), offset=a)
             for a, b in ((0, 100), (100, 200))]
    result, set_aside = finish(merge(*parts), LABELS, n_resamples=0)
    assert set_aside == ["cat"] and list(result["by_metadata"]) == ["few"]


def test_errors_name_the_first_bad_row_of_all_blocks():
    table, probs = planted(50)
    frame = frame_of(table)
    labels = frame["label"].to_numpy().copy()
    labels[[30, 40]] = ["emu", "yak"]
    bad = probs.copy()
    bad[33, 1] = np.nan

    def merged(y, p):
        return merge(block_partial(y[:25], frame["pred"][:25].to_numpy(), LABELS, probs=p[:25]),
                     block_partial(y[25:], frame["pred"][25:].to_numpy(), LABELS, probs=p[25:], offset=25))

    for y, p in ((labels, probs), (frame["label"].to_numpy(), bad)):
        with pytest.raises(DataError) as whole_error:
            compute_metrics(y, frame["pred"].to_numpy(), LABELS, probs=p)
        with pytest.raises(DataError) as block_error:
            finish(merged(y, p), LABELS)
        assert str(block_error.value) == str(whole_error.value)


def test_counted_quantiles_are_numpys():
    """`core.counted.quantiles`, which the metrics, slices and shift report use, is np.quantile to the last bit."""
    rng = np.random.default_rng(3)
    q = np.r_[np.linspace(0, 1, 6), 0.1, 0.9, 0.99]
    for _ in range(500):
        x = np.round(rng.normal(size=rng.integers(1, 60)) * rng.choice([1, 1e6]), rng.integers(0, 3))
        values, counts = np.unique(x, return_counts=True)
        assert np.array_equal(counted_quantiles(values, counts, q), np.quantile(x, q))


def generation_frame(n: int = 240, seed: int = 0) -> pd.DataFrame:
    """A generation run's predictions with every column output_checks reads: checks that apply to some rows, a
    signal that applies to none, reasons (repeats among them), stop reasons, lengths with missing ones, losses,
    low-loss failures and the task/filter groups."""
    from erroranalysis.metrics.generation import low_loss_failures

    rng = np.random.default_rng(seed)
    json_ok = pd.array([None if r < 0.2 else bool(r < 0.6) for r in rng.random(n)], dtype=object)
    schema_ok = pd.array([None if r < 0.5 else bool(r < 0.8) for r in rng.random(n)], dtype=object)
    correct = np.array([(j is not False) and (s is not False) for j, s in zip(json_ok, schema_ok)])
    reasons = np.array(["", "json: not valid JSON (Expecting x)", "json_schema: no JSON to validate",
                        "length: cut off at max_tokens (64 tokens)", "json_schema: required (name)"], dtype=object)
    failure = ["; ".join(sorted(set(rng.choice(reasons[1:], rng.integers(1, 3))))) if not ok else ""
               for ok in correct]
    lengths = rng.integers(1, 80, n).astype(np.float64)
    lengths[rng.random(n) < 0.05] = np.nan
    loss = np.round(rng.gamma(2, 1, n), 1)
    return pd.DataFrame({
        "example_id": [f"g{i}" for i in range(n)], "text": ["prompt"] * n,
        "output": [f"output {i} " + "x" * int(rng.integers(0, 400)) for i in range(n)],
        "label": rng.choice(["pass", "fail", "other"], n), "pred": rng.choice(["pass", "fail", "unparseable"], n),
        "correct": correct, "check_json": json_ok, "check_json_schema": schema_ok,
        "check_refusal": pd.array([None] * n, dtype=object), "failure_reason": failure,
        "stop_reason": rng.choice(["stop", "length"], n), "n_output_tokens": lengths,
        "reference_loss": loss, "output_loss": np.round(rng.gamma(2, 1, n), 2),
        "low_loss_failure": low_loss_failures(loss, correct),
        "task": rng.choice(["a", "b"], n), "filter": rng.choice(["strict", "flexible"], n)})


def test_generation_checks_merged_over_blocks_are_the_whole():
    from erroranalysis.metrics.generation import check_counts, finish_checks, generation_metrics, merge_checks

    preds = generation_frame()
    labels = ["pass", "fail", "other"]
    expected = json.dumps(generation_metrics(preds, labels, max_new_tokens=64))
    assert json.loads(expected)["failure_reasons"] and json.loads(expected)["loss"]["low_loss_failure_ids"]
    for cuts in splits(len(preds), 2):
        merged = None
        bounds = [0, *cuts, len(preds)]
        for start, stop in zip(bounds, bounds[1:]):
            part = check_counts(preds.iloc[start:stop].reset_index(drop=True), labels, offset=start)
            merged = part if merged is None else merge_checks(part, merged)  # any order
        assert json.dumps(finish_checks(merged, labels, 64)) == expected, cuts


def test_exact_sum_is_the_sum_of_the_fractions():
    from fractions import Fraction

    from erroranalysis.core.counted import exact_sum

    rng = np.random.default_rng(4)
    x = np.concatenate([rng.normal(size=500) * 10.0 ** rng.integers(-300, 300, 500), [0.0, -0.0, 5e-324, 1.0]])
    assert exact_sum(x) == sum(Fraction(v) for v in x.tolist())
    assert exact_sum(x[:200]) + exact_sum(x[200:]) == exact_sum(x[::-1])
