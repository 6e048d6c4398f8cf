"""The checks stage on Ray workers gives the in-process answers: a run made by `stages.analyze` from a predictions
file with planted label errors (gold flipped on rows the model is confident about) and planted exact and near
duplicates, its checks run with `engine=None` and on a local Ray, several blocks per pass. Label-issue scores,
flags and exact duplicate groups are exact (the same artifacts); near duplicates are searched on a seeded sample
that checks.json states (here every row, so they agree too). The merge of the label-issue parts is checked
against cleanlab itself on random splits."""

import warnings

import numpy as np
import pandas as pd
import pytest

from erroranalysis import stages
from erroranalysis.core.errors import DataError
from erroranalysis.datachecks import blockwise as bw
from erroranalysis.engines import Engine
from erroranalysis.rundir import Run
from erroranalysis.rundir.readers import read_checks, read_checks_report
from erroranalysis.sources.table import DataOptions
from erroranalysis.stages.after import AfterParams
from erroranalysis.stages.data_checks import CheckParams, checks_run

LABELS = ["business", "sport", "tech"]
WORDS = {label: [f"{label[:3]}{i}" for i in range(400)] for label in LABELS}


def planted_predictions(path, n=600, seed=0):
    """Texts of their true class's words; 30 labels flipped on confident rows; rows 10..19 copied exactly (rows
    10..14 with another label), rows 20..24 copied with one word added (near duplicates)."""
    rng = np.random.default_rng(seed)
    true = rng.integers(0, 3, n)
    texts = [" ".join(rng.choice(WORDS[LABELS[t]], 14)) for t in true]
    logits = rng.normal(0, 1, (n, 3))
    logits[np.arange(n), true] += 5
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    given = true.copy()
    flipped = rng.choice(np.arange(100, n - 40), 30, replace=False)
    given[flipped] = (true[flipped] + 1) % 3
    for i in range(10):  # exact copies at the end, the first five with a conflicting label
        texts[n - 40 + i], true[n - 40 + i], probs[n - 40 + i] = texts[10 + i].upper() + "!", true[10 + i], probs[10 + i]
        given[n - 40 + i] = (given[10 + i] + 1) % 3 if i < 5 else given[10 + i]
    for i in range(5):
        texts[n - 30 + i] = texts[20 + i] + " " + WORDS[LABELS[true[20 + i]]][0]
        given[n - 30 + i] = true[n - 30 + i] = true[20 + i]
    names = np.asarray(LABELS, dtype=object)
    frame = pd.DataFrame({"id": [f"ex{i}" for i in range(n)], "text": texts, "label": names[given],
                          "pred": names[probs.argmax(1)],
                          **{f"prob_{c}": probs[:, j] for j, c in enumerate(LABELS)}})
    frame.to_parquet(path, index=False)
    exact = {(10 + i, n - 40 + i) for i in range(10)}
    near = {(20 + i, n - 30 + i) for i in range(5)}
    return set(flipped.tolist()), exact, near


def word_vectors(texts, dim=64):
    """Bag-of-words vectors, case-sensitive (deterministic, picklable): near copies share all but one word; the
    upper-case exact copies get vectors of their own, so that no two rows tie as neighbours (ties may be broken
    differently by the in-process self-search and the search against the reference)."""
    import hashlib

    out = np.zeros((len(texts), dim), dtype=np.float32)
    for row, text in enumerate(texts):
        for word in str(text).replace("!", "").split():
            seed = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "little")
            out[row] += np.random.default_rng(seed).normal(size=dim)
    return out


@pytest.fixture(scope="module")
def planted_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("checksray")
    flipped, exact, near = planted_predictions(folder / "preds.parquet")
    run = stages.analyze("classification", folder / "preds.parquet", folder / "run",
                         stages.Reading(data=DataOptions(id_column="id")),
                         after=AfterParams.with_seed(0, checks=False, slices=False, cluster=False))
    return run.path, flipped, exact, near


def both_engines(run_path, monkeypatch, **params):
    """checks.parquet and checks.json in-process, then on Ray with 128-row blocks."""
    import sys

    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import this test module
    checks_run(run_path, CheckParams(**params), embed=word_vectors)
    local = read_checks(Run.open(run_path)), read_checks_report(Run.open(run_path))
    monkeypatch.setattr("erroranalysis.engines.blocks.ROWS_PER_BLOCK", 128)
    checks_run(run_path, CheckParams(**params), embed=word_vectors, engine=Engine(engine="ray"))
    return local, (read_checks(Run.open(run_path)), read_checks_report(Run.open(run_path)))


@pytest.mark.parametrize("neighbors", [0.5, 0.0])
def test_ray_checks_equal_the_in_process_ones(local_ray, planted_run, monkeypatch, neighbors):
    run_path, flipped, exact, near = planted_run
    (frame, report), (ray_frame, ray_report) = both_engines(run_path, monkeypatch, label_issue_neighbors=neighbors)
    pd.testing.assert_frame_equal(frame, ray_frame)
    assert ray_report["duplicates"]["searched"] == {"rows": 600, "of": 600, "seed": 0}
    assert ray_report["params"]["sample"]["rows"] == 600
    ray_report["duplicates"].pop("searched")
    for key in ("engine", "sample"):
        ray_report["params"].pop(key)
    assert ray_report == report
    flags = set(np.flatnonzero(ray_frame["label_issue"].to_numpy(dtype=bool)).tolist())
    assert len(flags & flipped) >= 0.8 * len(flipped)  # the planted label errors are found
    group = ray_frame["duplicate_group"].to_numpy()
    kind = ray_frame["duplicate_kind"].to_numpy()
    for a, b in exact:
        assert group[a] == group[b] >= 0 and kind[a] == "exact"
    for a, b in near:
        assert group[a] == group[b] >= 0 and kind[a] == "near"
    assert report["duplicates"]["n_conflict_groups"] == 5


def test_ray_states_a_sample_smaller_than_the_set(local_ray, planted_run, monkeypatch):
    run_path, _, exact, _ = planted_run
    (frame, _), (ray_frame, ray_report) = both_engines(run_path, monkeypatch, near_sample=300)
    assert ray_report["duplicates"]["searched"] == {"rows": 300, "of": 600, "seed": 0}
    pd.testing.assert_series_equal(frame["label_issue"], ray_frame["label_issue"])  # exact whatever the sample
    group = ray_frame["duplicate_group"].to_numpy()
    assert all(group[a] == group[b] >= 0 for a, b in exact)  # exact duplicates never depend on the sample


def test_a_bad_probability_is_the_same_error_on_ray(local_ray, tmp_path, monkeypatch):
    from fake_runs import inferred_run

    n = 300
    frame = pd.DataFrame({"example_id": [f"ex{i}" for i in range(n)], "text": [f"text {i}" for i in range(n)],
                          "label": [LABELS[i % 3] for i in range(n)], "pred": [LABELS[0]] * n})
    probs = np.full((n, 3), 1 / 3, dtype=np.float32)
    probs[200, 1] = np.nan  # in the fourth block of 64 rows
    run = inferred_run(tmp_path / "nan", frame, labels=LABELS, probs=probs)
    monkeypatch.setattr("erroranalysis.engines.blocks.ROWS_PER_BLOCK", 64)
    messages = []
    for engine in (None, Engine(engine="ray")):
        with pytest.raises(DataError) as caught:
            checks_run(run.path, CheckParams(embedder="none"), engine=engine)
        messages.append(str(caught.value))
    assert messages[0] == messages[1]
    assert "row 200, class 'sport': probability nan is not a finite number" in messages[0]
    assert not (run.path / "checks.parquet").exists()


def test_the_merged_flags_equal_cleanlab_on_any_split():
    from cleanlab.filter import find_label_issues

    rng = np.random.default_rng(3)
    for trial in range(12):
        n, k = int(rng.integers(30, 2000)), int(rng.integers(2, 6))
        true = rng.integers(0, k, n)
        logits = rng.normal(0, 1.5, (n, k))
        logits[np.arange(n), true] += rng.uniform(0, 4)
        probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
        ids = true.copy()
        noisy = rng.random(n) < 0.15
        ids[noisy] = rng.integers(0, k, noisy.sum())
        cuts = np.sort(rng.choice(np.arange(1, n), int(rng.integers(0, 6)), replace=False))
        splits = list(zip(np.r_[0, cuts], np.r_[cuts, n]))
        for filter_by in ("prune_by_noise_rate", "prune_by_class", "both", "confident_learning"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                expected = find_label_issues(ids, probs, filter_by=filter_by, n_jobs=1)
            assert (merged_flags(ids, probs, filter_by, splits) == expected).all(), (trial, filter_by)


def merged_flags(ids, probs, filter_by, splits):
    parts = [bw.class_sums(ids[a:b], probs[a:b]) for a, b in splits]
    counts, sums = sum(p[0] for p in parts), sum(p[1] for p in parts)
    thresholds = bw.confident_thresholds(counts, sums)
    if filter_by == "confident_learning":
        return bw.confident_learning_flags(ids, probs, thresholds)
    quota = bw.prune_matrix(sum(bw.joint_counts(ids[a:b], probs[a:b], thresholds) for a, b in splits), counts)
    active = bw.active_cells(filter_by, quota)
    bounds = bw.boundaries(bw.merge_sparse([bw.cell_histogram(ids[a:b], probs[a:b], active) for a, b in splits]),
                           quota)
    rows = np.arange(len(ids))
    chosen = bw.select_boundary([c for a, b in splits for c in bw.boundary_candidates(ids[a:b], probs[a:b],
                                                                                        rows[a:b], bounds)], bounds)
    return np.concatenate([bw.flags(ids[a:b], probs[a:b], rows[a:b], filter_by, bounds, chosen,
                                    int((counts > 0).sum())) for a, b in splits])
