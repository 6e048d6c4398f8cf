"""The metrics stage counts a run block by block (`engines.blocks.map_blocks`) and merges the counts: on real runs
made by `analyze`, metrics.json is exactly what `compute_metrics` (and `adjust_metrics` for generation) gives over
all rows at once, and exactly the same under a local Ray."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from conftest import write_jsonl

from erroranalysis import stages
from erroranalysis.engines import Engine
from erroranalysis.rundir import readers
from erroranalysis.stages.after import AfterParams
from erroranalysis.stages.common import metadata_of

LABELS = ["ant", "bee", "cat", "dog"]
BLOCK = 37  # rows per block: several blocks, the last one short


@pytest.fixture(autouse=True)
def _small_blocks(monkeypatch):
    import erroranalysis.engines.blocks as blocks

    monkeypatch.setattr(blocks, "ROWS_PER_BLOCK", BLOCK)
    monkeypatch.setattr(blocks.map_blocks, "__kwdefaults__", {**blocks.map_blocks.__kwdefaults__,
                                                              "rows_per_block": BLOCK})


def planted_rows(n: int = 300, seed: int = 0) -> list[dict]:
    """Predictions made elsewhere with prob_<label> columns and metadata for every bucket rule: a categorical with
    more than 20 values and tied counts, a many-valued number with ties and missing cells, an integer with missing
    cells, a boolean with missing cells, tags (lists, some empty or missing)."""
    r = random.Random(seed)
    rows = []
    for i in range(n):
        label = r.choice(LABELS)
        pred = label if r.random() < 0.6 else r.choice(LABELS)
        weights = [r.random() + (2.0 if name == pred else 0.0) for name in LABELS]
        probs = {f"prob_{name}": w / sum(weights) for name, w in zip(LABELS, weights)}
        rows.append({"id": f"ex{i}", "text": " ".join(r.choice(["alpha", "beta", "gamma"])
                                                      for _ in range(r.randint(1, 30))),
                     "label": label, "pred": pred, **probs, "shop": f"s{r.randint(0, 29)}",
                     "price": None if r.random() < 0.1 else round(r.gauss(0, 10), 1),
                     "stars": None if r.random() < 0.1 else r.randint(1, 5),
                     "promo": None if r.random() < 0.1 else r.random() < 0.5,
                     "tags": None if r.random() < 0.1 else r.sample(["x", "y", "z", "w"], r.randint(0, 3))})
    return rows


def analyzed(tmp_path, task: str = "classification", rows=None):
    from erroranalysis.sources.table import DataOptions

    tmp_path.mkdir(parents=True, exist_ok=True)
    path = write_jsonl(tmp_path / "preds.jsonl", rows if rows is not None else planted_rows())
    return stages.analyze(task, path, tmp_path / "run", stages.Reading(data=DataOptions(id_column="id")),
                          after=AfterParams.with_seed(0, checks=False, slices=False, cluster=False))


def in_process(run) -> dict:
    """metrics.json as the stage computed it before it counted blocks: every row read at once."""
    from erroranalysis.metrics import compute_metrics

    preds, probs = readers.read_predictions(run), readers.read_probs(run)
    metadata = metadata_of(run, preds.columns)
    result = compute_metrics(preds["label"].to_numpy(), preds["pred"].to_numpy(), run.labels,
                             probs=None if probs is None else np.asarray(probs), metadata=preds[metadata],
                             texts=preds["text"].to_numpy(), seed=0, n_resamples=200)
    if run.task == "generation":
        from erroranalysis.metrics.generation import adjust_metrics

        result = adjust_metrics(result, preds, run.labels, max_new_tokens=None)
    return json.loads(json.dumps(result))


def metrics_text(run, engine=None) -> str:
    stages.compute_run_metrics(run, stages.MetricsParams(seed=0, n_resamples=200), engine=engine)
    return readers.artifact_path(run, "metrics.json").read_text(encoding="utf-8")


def test_blocks_give_the_in_process_metrics_of_a_classification_run(tmp_path):
    run = analyzed(tmp_path)
    assert readers.n_predictions(run) > 5 * BLOCK and readers.read_probs(run) is not None
    result = json.loads(metrics_text(run))
    assert result == in_process(run)
    assert {"shop", "price", "stars", "promo", "tags", "text_length"} <= set(result["by_metadata"])
    assert result["by_metadata"]["shop"][-1]["value"] == "(other)"


def test_blocks_give_the_in_process_metrics_of_a_generation_run(tmp_path):
    from test_failure_modes import planted_rows as generation_rows

    run = analyzed(tmp_path, "generation", generation_rows())
    assert readers.n_predictions(run) > 2 * BLOCK
    assert json.loads(metrics_text(run)) == in_process(run)


def test_ray_gives_the_same_metrics_json(tmp_path, local_ray):
    from test_failure_modes import planted_rows as generation_rows

    for run in (analyzed(tmp_path / "classification"), analyzed(tmp_path / "generation", "generation",
                                                                 generation_rows())):
        local = metrics_text(run)
        assert metrics_text(run, Engine("ray")) == local, run.task


def crafted_run(out, bad_label_row: int | None = None, bad_probs_row: int | None = None, n: int = 150):
    """A classification run written directly (as the stages write one), with a label outside the manifest's labels
    or a NaN probability planted in one row: what an edited or damaged run holds."""
    import pandas as pd

    from erroranalysis import rundir
    from erroranalysis.rundir import create_run

    rng = np.random.default_rng(0)
    label = np.asarray(LABELS, dtype=object)[rng.integers(0, 4, n)]
    if bad_label_row is not None:
        label[bad_label_row] = "yak"
    probs = rng.dirichlet(np.ones(4), n).astype(np.float32)
    if bad_probs_row is not None:
        probs[bad_probs_row, 2] = np.nan
    frame = pd.DataFrame({"example_id": [f"r{i}" for i in range(n)], "text": ["a b"] * n, "label": label,
                          "pred": np.asarray(LABELS)[probs.argmax(1) % 4], "correct": np.zeros(n, bool),
                          "shop": rng.integers(0, 3, n)})
    with create_run(out, overwrite=True, task="classification", labels=LABELS, seed=0,
                    data={"rows": n, "metadata_columns": ["shop"]}) as run:
        with run.stage("load_predictions", {}) as staging:
            staging.write_parquet(rundir.PREDICTIONS, frame)
            staging.write_npy(rundir.PROBS, probs)
    return run


def test_a_bad_cell_in_a_block_is_the_same_one_line_error_under_both_engines(tmp_path, local_ray):
    from erroranalysis.core.errors import DataError

    for bad, expected in (({"bad_label_row": 100}, "y_true has labels not in labels: 'yak'"),
                          ({"bad_probs_row": 93}, "probs row 93 has NaN or inf")):
        run = crafted_run(tmp_path / "run", **bad)
        errors = []
        for engine in (None, Engine("ray")):
            with pytest.raises(DataError) as caught:
                stages.compute_run_metrics(run, engine=engine)
            errors.append(str(caught.value))
        assert errors[0] == errors[1] and errors[0].startswith(expected), errors
