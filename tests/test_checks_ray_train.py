"""The checks stage with a training file on Ray workers gives the in-process answers: a run made by
`stages.analyze` from a predictions file (tests/test_checks_ray.py's planted one), a training file with planted
leaks (eval texts copied exactly, some with another label, and near copies), checks run with `engine=None` and on a
local Ray with small blocks. Leakage flags and the shift report's counts are exact; near leakage is searched on the
seeded samples checks.json states (here every row, so it agrees too). The count-based shift parts are checked against
numpy and scipy over random splits."""

import io
import sys
from collections import Counter

import numpy as np
import pandas as pd
import pytest
from test_checks_ray import planted_predictions, word_vectors

from erroranalysis import stages
from erroranalysis.core.errors import DataError
from erroranalysis.core.progress import Reporter
from erroranalysis.datachecks import shift as sh
from erroranalysis.datachecks import train_blocks as tb
from erroranalysis.engines import Engine
from erroranalysis.rundir import Run
from erroranalysis.rundir.readers import read_checks, read_checks_report
from erroranalysis.sources.table import DataOptions
from erroranalysis.stages.after import AfterParams
from erroranalysis.stages.data_checks import CheckParams, checks_run

EXACT = range(30, 40)  # eval rows copied into training (upper case: the same normalized text)
RELABELED = range(30, 34)  # ... of which these with another label
NEAR = range(50, 55)  # eval rows copied with one word added


@pytest.fixture(scope="module")
def leaky(tmp_path_factory):
    """A run of 600 predictions and a training file of 300 rows: fresh texts, 10 exact copies of eval rows (4 with
    another label) and 5 near copies."""
    folder = tmp_path_factory.mktemp("checkstrain")
    planted_predictions(folder / "preds.parquet")
    run = stages.analyze("classification", folder / "preds.parquet", folder / "run",
                         stages.Reading(data=DataOptions(id_column="id")),
                         after=AfterParams.with_seed(0, checks=False, slices=False, cluster=False))
    preds = pd.read_parquet(folder / "preds.parquet")
    rng = np.random.default_rng(7)
    words = [f"w{i}" for i in range(300)] + [f"spo{i}" for i in range(50)]
    texts = [" ".join(rng.choice(words, int(rng.integers(8, 30)))) for _ in range(285)]
    labels = [["business", "sport", "tech"][i % 3] for i in range(285)]
    for i in EXACT:
        texts.append(preds["text"][i].upper())
        other = {"business": "sport", "sport": "tech", "tech": "business"}[preds["label"][i]]
        labels.append(other if i in RELABELED else preds["label"][i])
    for i in NEAR:
        texts.append(preds["text"][i] + " extra")
        labels.append(preds["label"][i])
    train = pd.DataFrame({"text": texts, "label": labels})
    train.to_json(folder / "train.jsonl", orient="records", lines=True)
    train.to_parquet(folder / "train.parquet", row_group_size=64)
    return run.path, folder


def ray_stated(report: dict) -> dict:
    """Take out of a Ray run's checks.json what it states and in-process does not (the samples searched, the
    engine), checking that the stage record states the leakage sample as checks.json does; that sample."""
    searched = report["leakage"].pop("searched")
    assert report["params"].pop("leakage_sample") == searched
    report["duplicates"].pop("searched")
    for key in ("engine", "sample"):
        report["params"].pop(key)
    return searched


def both_engines(run_path, monkeypatch, stream=None, **params):
    """checks.parquet and checks.json in-process, then on Ray with 128-row blocks."""
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules["test_checks_ray"])  # word_vectors: the workers cannot import it
    checks_run(run_path, CheckParams(**params), embed=word_vectors)
    local = read_checks(Run.open(run_path)), read_checks_report(Run.open(run_path))
    monkeypatch.setattr("erroranalysis.engines.blocks.ROWS_PER_BLOCK", 128)
    checks_run(run_path, CheckParams(**params), embed=word_vectors, engine=Engine(engine="ray"),
               progress=Reporter(stream or io.StringIO(), terminal=False))
    return local, (read_checks(Run.open(run_path)), read_checks_report(Run.open(run_path)))


def test_ray_leakage_and_shift_equal_the_in_process_ones(local_ray, leaky, monkeypatch):
    """A JSONL training file (a worker's Parquet copy; the next test reads the Parquet file itself)."""
    run_path, folder = leaky
    stream = io.StringIO()
    (frame, report), (ray_frame, ray_report) = both_engines(run_path, monkeypatch, stream,
                                                            train=str(folder / "train.jsonl"))
    pd.testing.assert_frame_equal(frame, ray_frame)
    assert ray_stated(ray_report) == {"eval": {"rows": 600, "of": 600, "seed": 0},
                                      "train": {"rows": 300, "of": 300, "seed": 0}}
    assert ray_report == report
    assert "near leakage" not in stream.getvalue()  # every row searched: nothing to say
    hit = ray_frame["in_train"].to_numpy(dtype=bool)
    assert set(np.flatnonzero(hit)) == set(EXACT) | set(NEAR)
    differs = ray_frame["train_label_differs"].to_numpy(dtype=bool)
    assert set(np.flatnonzero(differs)) == set(RELABELED)
    leak = ray_report["leakage"]
    assert (leak["n_exact"], leak["n_near"], leak["n_label_differs"]) == (10, 5, 4)
    shift = ray_report["shift"]
    assert shift["n_train"] == 300 and shift["domain"]["auc"] is not None


def test_ray_states_the_leakage_sample_in_one_line(local_ray, leaky, monkeypatch):
    run_path, folder = leaky
    stream = io.StringIO()
    (frame, report), (ray_frame, ray_report) = both_engines(run_path, monkeypatch, stream, near_sample=200,
                                                            train=str(folder / "train.parquet"))
    notes = [line for line in stream.getvalue().splitlines() if "near leakage" in line]
    assert len(notes) == 1 and "200 of 600 eval rows against 200 of 300 training rows" in notes[0]
    assert ray_report["leakage"]["searched"]["train"] == {"rows": 200, "of": 300, "seed": 0}
    exact = ray_frame["train_similarity"].to_numpy() == 1.0  # exact leaks never depend on the sample
    assert set(np.flatnonzero(exact)) == set(EXACT)
    pd.testing.assert_series_equal(frame["train_similarity"] == 1.0, ray_frame["train_similarity"] == 1.0)
    for key in ("class_balance", "lengths", "vocabulary", "words", "n_train", "n_eval"):
        assert ray_report["shift"][key] == report["shift"][key]  # counts: exact whatever the sample


@pytest.mark.parametrize("bad", ["missing", "empty_label", "duplicate_id"])
def test_a_bad_training_file_is_the_same_error_under_both_engines(local_ray, leaky, monkeypatch, tmp_path, bad):
    run_path, folder = leaky
    train = pd.read_parquet(folder / "train.parquet")
    train["tid"] = [f"t{i}" for i in range(len(train))]
    params = {}
    if bad == "missing":
        train = train.drop(columns="label")
    elif bad == "empty_label":
        train.loc[250, "label"] = ""
    else:
        train.loc[270, "tid"] = "t5"
        params["train_id_column"] = "tid"
    path = tmp_path / "train.jsonl"
    train.to_json(path, orient="records", lines=True)
    errors = []
    for engine in (None, Engine(engine="ray")):
        monkeypatch.setattr("erroranalysis.engines.blocks.ROWS_PER_BLOCK", 64)
        with pytest.raises(DataError) as caught:
            checks_run(run_path, CheckParams(train=str(path), embedder="none", **params), engine=engine)
        errors.append(str(caught.value))
    assert errors[0] == errors[1] and "\n" not in errors[0]
    assert str(path) in errors[0]


def test_shift_counts_merge_over_any_split_to_the_whole():
    """`side_counts` of blocks add up to the whole's, and the report from counts equals numpy's quantiles and scipy's
    KS test on the values (exact p-value up to 10,000 values a side, asymptotic above)."""
    from scipy.stats import ks_2samp

    rng = np.random.default_rng(3)
    vocab = [f"w{i}" for i in range(50)]
    texts = [" ".join(rng.choice(vocab, int(rng.integers(0, 12)))) for _ in range(400)]
    labels = rng.choice(["a", "b", "c"], 400)
    whole = sh.side_counts(texts, labels)
    for _ in range(3):
        cuts = np.sort(rng.choice(np.arange(1, 400), 5, replace=False))
        parts = [sh.side_counts(texts[a:b], labels[a:b]) for a, b in zip(np.r_[0, cuts], np.r_[cuts, 400])]
        merged = parts[0]
        for part in parts[1:]:
            merged = sh.add_counts(merged, part)
        assert merged == whole
    for n1, n2 in [(7, 5), (500, 80), (12_000, 30_000)]:
        t, e = rng.poisson(15, n1), rng.poisson(17, n2)
        got = sh.lengths_of_counts(Counter(t.tolist()), Counter(e.tolist()))
        ks = ks_2samp(t.astype(float), e.astype(float))
        assert (got["ks_statistic"], got["ks_p_value"]) == (ks.statistic, ks.pvalue)
        q = np.quantile(t.astype(float), [0.1, 0.5, 0.9, 0.99])
        assert [got["train"][k] for k in ("p10", "median", "p90", "p99")] == q.tolist()
        assert got["train"]["mean"] == t.mean() and got["eval"]["empty"] == int((e == 0).sum())


def test_the_label_rule_votes_merge_over_blocks():
    labels = ["neg", "pos"]
    assert tb.ids_are_labels([tb.label_votes(["0", "1"], labels), tb.label_votes(["1"], labels)], labels)
    assert not tb.ids_are_labels([tb.label_votes(["0"], labels), tb.label_votes(["pos"], labels)], labels)
    assert not tb.ids_are_labels([tb.label_votes(["0"], labels), tb.label_votes(["2"], labels)], labels)
    keys = np.array([b"b", b"a", b"b", b"c"], dtype="S16")
    first = tb.first_rows(keys, np.array([5, 9, 2, 7]))
    assert keys[first].tolist() == [b"a", b"b", b"c"] and [5, 9, 2, 7][first[1]] == 2
    assert tb.join(np.array([b"c", b"z", b"a"], dtype="S16"), keys[first]).tolist() == [2, -1, 0]


def test_an_in_memory_training_set_gives_the_same_checks_on_ray(local_ray, leaky, monkeypatch):
    """The Python API's `train_set` (an EvalSet already read) goes to the workers as a Parquet copy."""
    from ray import cloudpickle

    from erroranalysis.sources.train_table import read_train_set

    run_path, folder = leaky
    cloudpickle.register_pickle_by_value(sys.modules["test_checks_ray"])
    train_set = read_train_set(folder / "train.jsonl")
    checks_run(run_path, CheckParams(shift=False), embed=word_vectors, train_set=train_set)
    frame, report = read_checks(Run.open(run_path)), read_checks_report(Run.open(run_path))
    monkeypatch.setattr("erroranalysis.engines.blocks.ROWS_PER_BLOCK", 128)
    checks_run(run_path, CheckParams(shift=False), embed=word_vectors, train_set=train_set,
               engine=Engine(engine="ray"))
    ray_report = read_checks_report(Run.open(run_path))
    pd.testing.assert_frame_equal(frame, read_checks(Run.open(run_path)))
    ray_report["leakage"].pop("searched")
    assert ray_report["leakage"] == report["leakage"] and ray_report["shift"] is None


def test_the_leakage_summary_merges_over_any_split():
    """`leak_part`s of any split of the eval rows merge (`merge_leak`) into `report.leakage_summary` of the whole."""
    from erroranalysis.datachecks.duplicates import find_leakage
    from erroranalysis.datachecks.report import leakage_summary

    rng = np.random.default_rng(5)
    train_texts = [f"t {i % 40}" for i in range(120)]
    train_labels = np.asarray(rng.choice(["a", "b"], 120), dtype=object)
    eval_texts = [f"t {i}" if i % 3 else f"e {i}" for i in range(90)]
    gold = np.asarray(rng.choice(["a", "b"], 90), dtype=object)
    leak = find_leakage(eval_texts, train_texts, eval_labels=gold, train_labels=train_labels, near=False)
    ids = np.asarray([f"x{i}" for i in range(90)], dtype=object)
    train_ids = np.asarray([f"r{i}" for i in range(120)], dtype=object)
    train_set = type("TrainSet", (), {"path": "train.jsonl", "__len__": lambda self: 120})()
    whole = leakage_summary(leak, ids, gold, train_ids, train_labels, train_set, near=False)
    at = leak["train_index"].to_numpy()
    hit = at >= 0
    for _ in range(3):
        cuts = np.r_[0, np.sort(rng.choice(np.arange(1, 90), 4, replace=False)), 90]
        parts = [tb.leak_part(np.arange(a, b), ids[a:b], gold[a:b], at[a:b],
                              np.where(hit, train_ids[np.maximum(at, 0)], None)[a:b],
                              np.where(hit, train_labels[np.maximum(at, 0)], "")[a:b],
                              leak["train_kind"].to_numpy()[a:b], leak["train_similarity"].to_numpy()[a:b])
                 for a, b in zip(cuts[:-1], cuts[1:])]
        assert tb.merge_leak(parts, "train.jsonl", 120, near=False) == whole
    assert whole["n_in_train"] == 26 and whole["n_label_differs"] > 0 and len(whole["examples"]) == 20
