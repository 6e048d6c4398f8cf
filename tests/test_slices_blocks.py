"""The slices from per-block counts (the distributed engine's method): each merged partial equals the whole's over
random splits, and the stage over a real run gives the in-process slices and members, block by block in process
and on a local Ray."""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest

import erroranalysis as ea
from erroranalysis import slices as sl
from erroranalysis.engines import blocks as engine_blocks
from erroranalysis.rundir import Run
from erroranalysis.rundir.readers import read_slices
from erroranalysis.slices import _columns as columns
from erroranalysis.slices._blocks import summarize_block
from erroranalysis.stages.slices import SliceParams, slices_by_blocks, slices_run

WORDS = ["rain", "the", "sun", "big", "not", "good", "w1", "w2", "w3", "storm", "cat", "dog", "of", "and", "snow"]


def predictions(n: int, seed: int) -> pd.DataFrame:
    """Texts, a label, metadata of every kind; failures planted on "storm", source "b", score > 1 with label q,
    and k == 3 with tag x."""
    rng = np.random.default_rng(seed)
    texts = [" ".join(rng.choice(WORDS, rng.integers(0, 12))) for _ in range(n)]
    source = rng.choice(np.array(["a", "b", "c", None], dtype=object), n)
    score = np.where(rng.random(n) < 0.05, np.nan, rng.normal(size=n).round(2))
    k = rng.integers(0, 5, n)
    tags = [list(rng.choice(["x", "y", "z"], rng.integers(0, 3), replace=False)) for _ in range(n)]
    label = rng.choice(["p", "q", "r"], n)
    storm = np.array(["storm" in t for t in texts])
    fail = ((rng.random(n) < 0.1) | ((source == "b") & (rng.random(n) < 0.4)) | (storm & (rng.random(n) < 0.5))
            | ((score > 1) & (label == "q") & (rng.random(n) < 0.6))
            | ((k == 3) & np.array(["x" in t for t in tags]) & (rng.random(n) < 0.5)))
    return pd.DataFrame({"example_id": [f"e{i}" for i in range(n)], "text": texts, "label": label,
                         "pred": np.where(fail, np.where(label == "p", "q", "p"), label), "correct": ~fail,
                         "truncated": rng.random(n) < 0.1, "source": source, "score": score, "k": k, "tags": tags,
                         "uid": [f"u{i}" for i in range(n)]})


META = ("source", "score", "k", "tags", "uid")
INPUTS = sl.Inputs(label=True, truncated=True, metadata=META)


def cuts(n: int, rng) -> list[int]:
    return [0, *sorted(set(rng.integers(1, n, rng.integers(1, 8)).tolist())), n]


def over_blocks(frame: pd.DataFrame, bounds: list[int], rng):
    """`run_pass` over the blocks `bounds` cut: in row order when asked, else shuffled (as Ray returns them)."""
    def run_pass(fn, ordered, **kwargs):
        parts = list(zip(bounds[:-1], bounds[1:]))
        if not ordered:
            parts = [parts[i] for i in rng.permutation(len(parts))]
        for a, b in parts:
            yield fn(sl.rows_of(frame.iloc[a:b].reset_index(drop=True), INPUTS, a), **kwargs)
    return run_pass


@pytest.mark.parametrize("seed", range(3))
def test_merged_block_summaries_and_terms_equal_the_wholes(seed):
    rng = np.random.default_rng(seed)
    frame = predictions(900, seed)
    whole = sl.rows_of(frame, INPUTS, 0)
    bounds = cuts(len(frame), rng)
    parts = list(over_blocks(frame, bounds, rng)(summarize_block, True, n=len(frame), min_support=12, ngram_max=2))
    merged = columns.merge_summaries([p.summary for p in parts])
    expected = columns.summarize_columns(len(frame), whole.texts, whole.metadata, whole.labels, whole.truncated)
    for got, want in [(merged.length, expected.length), (merged.label, expected.label),
                      *((merged.metadata[c], expected.metadata[c]) for c in META)]:
        assert (got.kind, got.dtype, got.missing, got.n) == (want.kind, want.dtype, want.missing, want.n)
        assert list(got.uniques) == list(want.uniques) and got.counts.tolist() == want.counts.tolist()
    assert merged.truncated == expected.truncated and merged.any_text == expected.any_text
    # every term held by 12 texts is a candidate of some block (the partition method), whatever the split
    _, frequent = sl.count_terms(whole.texts, min_support=12, ngram_max=2, phrase_stop_words=False)
    assert set(frequent) <= set().union(*(p.terms for p in parts))


@pytest.mark.parametrize("seed,merge,max_order", [(0, False, 3), (1, True, 2), (2, False, 1)])
def test_search_over_random_blocks_gives_the_whole_search(seed, merge, max_order):
    rng = np.random.default_rng(seed)
    frame = predictions(1500, seed)
    params = SliceParams(min_support=12, merge=merge, max_order=max_order)
    close = {"storm": [1.0, 0.1, 0], "snow": [0.9, 0.3, 0], "rain": [0.95, 0.2, 0]}

    def embed(words):  # storm, snow and rain near each other, every other word apart
        return np.asarray([close.get(w, [0, np.sin(hash(w) % 97), np.cos(hash(w) % 97)]) for w in words])

    whole = sl.rows_of(frame, INPUTS, 0)
    features = sl.extract_features(whole.texts, whole.metadata, labels=whole.labels, truncated=whole.truncated,
                                   min_support=12, params=params.project(sl.FeatureParams))
    expected = sl.find_slices(features, ~whole.failed, example_ids=whole.ids, embed_fn=embed,
                              params=params.project(sl.SearchParams))
    bounds = cuts(len(frame), rng)
    found = sl.search_blocks(over_blocks(frame, bounds, rng), len(frame), min_support=12, params=params,
                             embed_fn=embed)
    # every feature and its examples and failures, merged from the blocks, are the whole's
    got = found.features
    assert (got.keys, got.descriptions, got.groups, got.kinds, got.terms) == (
        features.keys, features.descriptions, features.groups, features.kinds, features.terms)
    assert got.messages == expected.messages  # the features' messages, then the search's
    assert found.support.tolist() == features.support().tolist()
    assert found.fails.tolist() == np.asarray(features.matrix.T @ whole.failed.astype(np.int64)).ravel().tolist()
    pd.testing.assert_frame_equal(found.result.slices, expected.slices)
    assert found.result.summary() == expected.summary()
    members = pd.concat([sl.member_rows(sl.rows_of(frame.iloc[a:b].reset_index(drop=True), INPUTS, a), found.spec,
                                        found.slices) for a, b in zip(bounds[:-1], bounds[1:])], ignore_index=True)
    assert members["example_id"].tolist() == expected.members["example_id"].tolist()
    assert members["slice_id"].tolist() == expected.members["slice_id"].tolist()
    assert 'text contains "storm"' in set(expected.slices["description"]) | {
        d for d in expected.slices["description"] if "storm" in d}


@pytest.fixture(scope="module")
def analyzed(tmp_path_factory):
    """A real run: `analyze` of a Parquet predictions file (no checks, no clusters), slices in process."""
    folder = tmp_path_factory.mktemp("slices_blocks")
    frame = predictions(2000, 7).drop(columns=["correct", "uid"]).rename(columns={"example_id": "id"})
    path = folder / "predictions.parquet"
    frame.to_parquet(path)
    run = ea.analyze(path, text="text", label="label", pred="pred", id="id", out=folder / "run", checks=None,
                     cluster=None, metrics=ea.MetricsParams(n_resamples=0), slices={"merge": False})
    return run.path


def tables(path):
    slices, members = read_slices(Run.open(path))
    return slices, members.reset_index(drop=True)


def rerun(analyzed, tmp_path, monkeypatch, **kwargs):
    """The run's slices in process, then again from blocks of 400 rows (`kwargs`: how)."""
    copy = tmp_path / "run"
    shutil.copytree(analyzed, copy)
    expected = tables(copy)
    monkeypatch.setattr(engine_blocks, "ROWS_PER_BLOCK", 400)
    summary = slices_run(copy, merge=False, **kwargs) if kwargs else slices_by_blocks(
        Run.open(copy), SliceParams(merge=False))
    assert len(engine_blocks.plan(copy / "predictions.parquet", 400)) >= 4
    return expected, tables(copy), summary


def test_the_stage_from_blocks_in_process_gives_the_in_process_tables(analyzed, tmp_path, monkeypatch):
    (slices, members), (got_slices, got_members), summary = rerun(analyzed, tmp_path, monkeypatch)
    pd.testing.assert_frame_equal(got_slices, slices)
    pd.testing.assert_frame_equal(got_members, members, check_dtype=False)
    assert {'text contains "storm"', 'source == "b"'} <= set(slices["description"])
    assert summary["n_examples"] == 2000 and summary["n_slices"] == len(slices)
    # the folder of shards replaced the file; in process again, a file replaces the folder
    assert (tmp_path / "run" / "slice_members.parquet").is_dir()
    slices_run(tmp_path / "run", merge=False)
    assert (tmp_path / "run" / "slice_members.parquet").is_file()
    pd.testing.assert_frame_equal(tables(tmp_path / "run")[1], members)


def test_the_stage_on_ray_gives_the_in_process_tables(local_ray, analyzed, tmp_path, monkeypatch):
    from erroranalysis.engines import Engine

    (slices, members), (got_slices, got_members), summary = rerun(analyzed, tmp_path, monkeypatch,
                                                                  engine=Engine(engine="ray"))
    pd.testing.assert_frame_equal(got_slices, slices)
    pd.testing.assert_frame_equal(got_members, members, check_dtype=False)
    assert (tmp_path / "run" / "slice_members.parquet").is_dir()  # one shard per block, written by the workers
    assert Run.open(tmp_path / "run").manifest["stages"]["slices"]["params"]["engine"] == "ray"


def test_a_bad_cell_in_a_later_block_is_the_in_process_error(tmp_path, monkeypatch):
    from fake_runs import inferred_run

    from erroranalysis.core.errors import RunError

    frame = predictions(300, 0)
    frame["correct"] = frame["correct"].astype(object)
    frame.loc[250, "correct"] = None
    run = inferred_run(tmp_path / "run", frame, labels=["p", "q", "r"], data={"metadata_columns": list(META)})
    with pytest.raises(RunError) as in_process:
        slices_run(run.path, merge=False)
    monkeypatch.setattr(engine_blocks, "ROWS_PER_BLOCK", 100)
    with pytest.raises(RunError) as by_blocks:
        slices_by_blocks(Run.open(run.path), SliceParams(merge=False))
    assert str(by_blocks.value) == str(in_process.value)
    assert "column 'correct': 1 missing values" in str(in_process.value)
    assert not (run.path / "slices.parquet").exists()
