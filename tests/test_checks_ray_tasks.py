"""The checks of other tasks' runs on Ray workers give the in-process answers: generation, regression, token
classification and classification without probabilities (no label issues: checks.json says why, as in-process) and multi-label with
sigmoids (cleanlab's multi-label flags, exact), runs made by `stages.analyze` from files with planted exact and near
duplicates, checked with `engine=None` and on a local Ray with 64-row blocks. Duplicate groups, kinds and conflicts
are exact; near duplicates are searched on the seeded sample checks.json states (every row, or fewer: then the exact
groups still agree). The driver never reads the predictions (`readers.read_predictions` fails if it is called)."""

import json

import numpy as np
import pandas as pd
import pytest

from erroranalysis import stages
from erroranalysis.core.errors import RunError
from erroranalysis.engines import Engine
from erroranalysis.rundir import Run
from erroranalysis.rundir.readers import read_checks, read_checks_report
from erroranalysis.sources.table import DataOptions
from erroranalysis.stages.after import AfterParams
from erroranalysis.stages.data_checks import CheckParams, checks_run

N = 300
WORDS = [f"w{i}" for i in range(300)]


def texts_with_copies(seed=0):
    """N texts of 20 words; rows 250..257 copy rows 10..17 exactly, rows 260..264 copy rows 20..24 with one word
    added (near duplicates)."""
    rng = np.random.default_rng(seed)
    texts = [" ".join(rng.choice(WORDS, 20, replace=False)) for _ in range(N)]
    for i in range(8):
        texts[250 + i] = texts[10 + i]
    for i in range(5):
        texts[260 + i] = texts[20 + i] + " " + WORDS[i]
    return texts, {(10 + i, 250 + i) for i in range(8)}, {(20 + i, 260 + i) for i in range(5)}


def word_vectors(texts, dim=64):
    """Bag-of-words vectors (deterministic, picklable): near copies share all but one word."""
    import hashlib

    out = np.zeros((len(texts), dim), dtype=np.float32)
    for row, text in enumerate(texts):
        for word in str(text).split():
            seed = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "little")
            out[row] += np.random.default_rng(seed).normal(size=dim)
    return out


def generation_run(folder):
    """Prompts with copies and the same outputs (a generation run's text is prompt and output), four copies graded
    against another reference: they fail where the original passes, but the gold ("pass") agrees: no conflict."""
    texts, exact, near = texts_with_copies()
    outputs = [f"answer {i % 40}" for i in range(N)]
    outputs[250:258], outputs[260:265] = outputs[10:18], outputs[20:25]
    refs = [o if i % 3 else "another answer" for i, o in enumerate(outputs)]
    refs[250:254] = ["a reference of its own"] * 4
    rows = [{"id": f"g{i}", "prompt": t, "output": outputs[i], "reference": refs[i]} for i, t in enumerate(texts)]
    path = folder / "outputs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = stages.analyze("generation", path, folder / "run", stages.Reading(data=DataOptions(id_column="id")),
                         after=AfterParams.with_seed(0, checks=False, slices=False, cluster=False))
    return run.path, exact, near


def regression_run(folder):
    texts, exact, near = texts_with_copies(seed=1)
    rng = np.random.default_rng(1)
    target = np.round(rng.normal(size=N), 3)
    target[250:258], target[260:265] = target[10:18], target[20:25]
    target[250:254] += 1.0  # conflicting values for four exact copies
    frame = pd.DataFrame({"id": [f"r{i}" for i in range(N)], "text": texts, "label": target,
                          "pred": target + rng.normal(scale=0.3, size=N)})
    frame.to_parquet(folder / "values.parquet", index=False)
    run = stages.analyze("regression", folder / "values.parquet", folder / "run",
                         stages.Reading(data=DataOptions(id_column="id")),
                         after=AfterParams.with_seed(0, checks=False, slices=False, cluster=False))
    return run.path, exact, near


def multilabel_run(folder):
    """Gold sets with sigmoids that follow the true sets; 20 gold sets flipped in one label where the model is
    confident (label issues to find); the copies carry the original's gold set and sigmoids, four of them flipped."""
    texts, exact, near = texts_with_copies(seed=3)
    rng = np.random.default_rng(3)
    true = (rng.random((N, 3)) < 0.4).astype(int)
    true[250:258], true[260:265] = true[10:18], true[20:25]
    probs = np.clip(0.1 + 0.8 * true + rng.normal(0, 0.08, (N, 3)), 0.01, 0.99)
    gold = true.copy()
    flipped = rng.choice(np.arange(30, 240), 20, replace=False)
    gold[flipped, 0] = 1 - gold[flipped, 0]
    gold[250:254, 1] = 1 - gold[250:254, 1]
    names = np.asarray(["a", "b", "c"], dtype=object)
    frame = pd.DataFrame({"id": [f"m{i}" for i in range(N)], "text": texts,
                          "label": [list(names[np.flatnonzero(r)]) for r in gold],
                          **{f"prob_{c}": probs[:, j] for j, c in enumerate(names)}})
    frame.to_parquet(folder / "sets.parquet", index=False)
    run = stages.analyze("multilabel", folder / "sets.parquet", folder / "run",
                         stages.Reading(data=DataOptions(id_column="id")),
                         after=AfterParams.with_seed(0, checks=False, slices=False, cluster=False))
    return run.path, set(flipped.tolist()) | set(range(250, 254)), exact, near


@pytest.mark.parametrize("filter_by", ["prune_by_noise_rate", "both"])
def test_multilabel_label_issues_on_ray_equal_the_in_process_ones(local_ray, tmp_path, monkeypatch, filter_by):
    """cleanlab's multi-label flags are the OR of its one-vs-rest binary flags: merged from the blocks' counts,
    histograms and boundary candidates per class, exactly; the scores are per row."""
    run_path, planted, exact, _ = multilabel_run(tmp_path)
    (frame, report), (ray_frame, ray_report) = both_engines(run_path, monkeypatch, filter_by=filter_by)
    pd.testing.assert_frame_equal(frame, ray_frame)
    ray_report["duplicates"].pop("searched")
    for key in ("engine", "sample"):
        ray_report["params"].pop(key)
    assert ray_report == report
    flags = set(np.flatnonzero(ray_frame["label_issue"].to_numpy(dtype=bool)).tolist())
    assert report["label_issues"]["available"] and len(flags & planted) >= 0.75 * len(planted)
    group = ray_frame["duplicate_group"].to_numpy()
    assert all(group[a] == group[b] >= 0 for a, b in exact)


def test_the_multilabel_flags_merge_over_any_split():
    """Against cleanlab's multi-label filter on every row at once, random splits, every rule, classes that every or
    no example carries (where cleanlab flags nothing or raises)."""
    from test_checks_ray import merged_flags

    from erroranalysis.datachecks import blockwise as bw
    from erroranalysis.datachecks.multilabel_issues import binary_problems, clip, find_multilabel_issues, flags_possible

    rng = np.random.default_rng(5)
    for trial in range(4):
        n, k = int(rng.integers(40, 300)), int(rng.integers(2, 4))
        true = (rng.random((n, k)) < 0.4).astype(int)
        if trial == 1:
            true[:, 0] = 0
        if trial == 2:
            true[:, -1] = 1
        probs = np.clip(0.15 + 0.7 * true + rng.normal(0, 0.25, (n, k)), 0, 1)
        gold = true.copy()
        noisy = (rng.random((n, k)) < 0.05) & (trial in (0, 3))
        gold[noisy] = 1 - gold[noisy]
        cuts = np.sort(rng.choice(np.arange(1, n), int(rng.integers(0, 5)), replace=False))
        splits = list(zip(np.r_[0, cuts], np.r_[cuts, n]))
        problems = binary_problems(gold, clip(probs))
        for filter_by in ("prune_by_noise_rate", "prune_by_class", "both", "confident_learning", "predicted_neq_given"):
            expected = find_multilabel_issues(gold, probs, list("abcd"[:k]), filter_by=filter_by)["label_issue"]
            got = np.zeros(n, dtype=bool)
            if flags_possible([sum(bw.class_sums(i[a:b], p[a:b])[0] for a, b in splits) for i, p in problems],
                              filter_by):
                for ids, p in problems:
                    got |= merged_flags(ids, p, filter_by, splits)
            assert (got == expected.to_numpy()).all(), (trial, filter_by)


def token_run(folder):
    """CoNLL-style sentences from a small vocabulary: many exact copies (each its gold tags, so no conflict), a
    quarter of the predictions all "O"."""
    import random

    from token_fixtures import sentence

    rng = random.Random(0)
    rows = [sentence(rng, i) for i in range(N)]
    for i, row in enumerate(rows):
        row["pred_tags"] = list(row["tags"]) if i % 4 else ["O"] * len(row["tags"])
    rows[250:258] = [{**rows[10 + i], "id": f"s{250 + i}"} for i in range(8)]
    path = folder / "sentences.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = stages.analyze("token-classification", path, folder / "run",
                         stages.Reading(data=DataOptions(id_column="id")),
                         after=AfterParams.with_seed(0, checks=False, slices=False, cluster=False))
    return run.path, {(10 + i, 250 + i) for i in range(8)}, set()


def classification_run(folder):
    """Predicted labels without probabilities: no label issues (in-process this ran on the driver)."""
    texts, exact, near = texts_with_copies(seed=2)
    labels = np.asarray(["a", "b", "c"], dtype=object)[np.arange(N) % 3]
    labels[250:254] = "c"  # rows 10..13 are b, c, a, b: three conflicts
    frame = pd.DataFrame({"id": [f"c{i}" for i in range(N)], "text": texts, "label": labels,
                          "pred": np.roll(labels, 1)})
    frame.to_parquet(folder / "preds.parquet", index=False)
    run = stages.analyze("classification", folder / "preds.parquet", folder / "run",
                         stages.Reading(data=DataOptions(id_column="id")),
                         after=AfterParams.with_seed(0, checks=False, slices=False, cluster=False))
    return run.path, exact, near


def both_engines(run_path, monkeypatch, **params):
    """checks.parquet and checks.json in-process, then on Ray with 64-row blocks and the driver barred from
    reading the predictions."""
    import sys

    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import this test module
    checks_run(run_path, CheckParams(**params), embed=word_vectors)
    local = read_checks(Run.open(run_path)), read_checks_report(Run.open(run_path))
    monkeypatch.setattr("erroranalysis.engines.blocks.ROWS_PER_BLOCK", 64)

    with monkeypatch.context() as m:
        m.setattr("erroranalysis.rundir.readers.read_predictions", barred)
        checks_run(run_path, CheckParams(**params), embed=word_vectors, engine=Engine(engine="ray"))
    return local, (read_checks(Run.open(run_path)), read_checks_report(Run.open(run_path)))


def barred(*args, **kwargs):
    raise AssertionError("the driver read every row")


MAKERS = {"generation": generation_run, "regression": regression_run, "classification": classification_run,
          "token-classification": token_run}
REASONS = {"generation": "the run has no probabilities (probs.npy)",
           "regression": "label issues are not computed for a regression run (cleanlab's regression check refits "
                         "a model on the data)",
           "classification": "the run has no probabilities (probs.npy)",
           "token-classification": "the run has no probabilities (probs.npy)"}
CONFLICTS = {"generation": 0, "regression": 4, "classification": 3, "token-classification": 0}


@pytest.mark.parametrize("task", sorted(MAKERS))
def test_ray_checks_equal_the_in_process_ones(local_ray, tmp_path, monkeypatch, task):
    run_path, exact, near = MAKERS[task](tmp_path)
    (frame, report), (ray_frame, ray_report) = both_engines(run_path, monkeypatch)
    pd.testing.assert_frame_equal(frame, ray_frame)
    assert ray_report["duplicates"].pop("searched") == {"rows": N, "of": N, "seed": 0}
    assert ray_report["params"].pop("engine") == "ray"
    assert ray_report["params"].pop("sample") == {"rows": N, "of": N, "seed": 0}
    assert ray_report == report
    assert report["label_issues"] == {"available": False, "reason": REASONS[task], "neighbors": None}
    assert ray_frame["label_issue_score"].isna().all() and ray_frame["label_issue"].isna().all()
    group, kind = ray_frame["duplicate_group"].to_numpy(), ray_frame["duplicate_kind"].to_numpy()
    assert all(group[a] == group[b] >= 0 and kind[a] == "exact" for a, b in exact)
    assert all(group[a] == group[b] >= 0 and kind[a] == "near" for a, b in near)
    assert report["duplicates"]["n_conflict_groups"] == CONFLICTS[task]


def test_ray_states_a_sample_smaller_than_the_set(local_ray, tmp_path, monkeypatch):
    run_path, exact, _ = generation_run(tmp_path)
    (frame, report), (ray_frame, ray_report) = both_engines(run_path, monkeypatch, near_sample=150)
    assert ray_report["duplicates"]["searched"] == {"rows": 150, "of": N, "seed": 0}
    exact_rows = frame["duplicate_kind"].eq("exact").to_numpy()
    for column in ("duplicate_group", "duplicate_conflict"):  # exact groups never depend on the sample
        np.testing.assert_array_equal(frame[column].to_numpy()[exact_rows], ray_frame[column].to_numpy()[exact_rows])
    assert ray_report["duplicates"]["n_exact_groups"] == report["duplicates"]["n_exact_groups"] == 8


def test_a_missing_id_is_the_same_error_on_ray(local_ray, tmp_path, monkeypatch):
    from fake_runs import inferred_run

    frame = pd.DataFrame({"example_id": [f"g{i}" for i in range(N)], "text": [f"prompt {i}" for i in range(N)],
                          "label": ["ref"] * N, "pred": ["out"] * N})
    frame.loc[200, "example_id"] = None  # in the fourth block of 64 rows
    run = inferred_run(tmp_path / "gen", frame, labels=[], task="generation")
    monkeypatch.setattr("erroranalysis.engines.blocks.ROWS_PER_BLOCK", 64)
    messages = []
    for engine in (None, Engine(engine="ray")):
        with pytest.raises(RunError) as caught, monkeypatch.context() as m:
            if engine is not None:  # the workers count the missing cells; the driver sums the counts
                m.setattr("erroranalysis.rundir.readers.read_predictions", barred)
            checks_run(run.path, CheckParams(embedder="none"), engine=engine)
        messages.append(str(caught.value))
    assert messages[0] == messages[1]
    assert messages[0].endswith("column 'example_id': 1 missing ids; every example needs one.")
    assert not (run.path / "checks.parquet").exists()
