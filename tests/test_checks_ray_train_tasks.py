"""The checks stage with a training file on Ray workers gives the in-process answers for multi-label, regression and
token-classification runs (runs made by `stages.analyze`, tests/test_checks_ray_tasks.py's builders), each with a
training file in its task's own shape (gold sets as lists, float targets, sentences as tokens and tags) and planted
leaks: eval rows copied exactly (some with another gold), near copies (one word added), fresh rows. Checked with
`engine=None` and on a local Ray with 64-row blocks, the driver barred from reading the predictions: checks.parquet
and checks.json are equal (bar the stated samples), and a bad cell of the training file is the same one-line error."""

import json
import random

import numpy as np
import pandas as pd
import pytest
from test_checks_ray_tasks import WORDS, both_engines, multilabel_run, regression_run, token_run
from test_checks_ray_train import ray_stated

from erroranalysis.core.errors import DataError
from erroranalysis.engines import Engine
from erroranalysis.stages.data_checks import CheckParams, checks_run

EXACT, OTHER_GOLD, NEAR = range(0, 12), range(0, 4), range(40, 45)  # eval rows copied, relabelled, near-copied


def regression_train(folder):
    """A CSV of targets: the copies' targets, four moved by +5 (another bin), and fresh rows."""
    source = pd.read_parquet(folder / "values.parquet")
    rng = np.random.default_rng(11)
    rows = [{"text": " ".join(rng.choice(WORDS, 20)), "label": round(float(rng.normal()), 3)} for _ in range(150)]
    for i in EXACT:
        rows.append({"text": source["text"][i], "label": source["label"][i] + (5.0 if i in OTHER_GOLD else 0.0)})
    rows += [{"text": source["text"][i] + " extra", "label": source["label"][i]} for i in NEAR]
    path = folder / "train.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path, (lambda frame: frame.assign(label=frame["label"].astype(object).where(frame.index != 120, "about 3")))


def multilabel_train(folder):
    """A Parquet file of gold sets as lists: the copies' sets, four with label c toggled, and fresh rows."""
    source = pd.read_parquet(folder / "sets.parquet")
    rng = np.random.default_rng(12)
    names = np.array(["a", "b", "c"], dtype=object)
    rows = [{"text": " ".join(rng.choice(WORDS, 20)), "label": list(names[rng.random(3) < 0.4])} for _ in range(150)]
    for i in EXACT:
        gold = set(source["label"][i]) ^ ({"c"} if i in OTHER_GOLD else set())
        rows.append({"text": source["text"][i], "label": sorted(gold)})
    rows += [{"text": source["text"][i] + " extra", "label": list(source["label"][i])} for i in NEAR]
    path = folder / "train.parquet"
    pd.DataFrame(rows).to_parquet(path, index=False, row_group_size=50)
    return path, (lambda frame: frame.assign(label=[["z"] if i == 120 else v for i, v in enumerate(frame["label"])]))


def token_train(folder):
    """A JSONL of sentences (tokens and tags): the copies, four with their ORG/LOC tags made O, and fresh ones."""
    from token_fixtures import sentence

    source = [json.loads(line) for line in (folder / "sentences.jsonl").read_text().splitlines()]
    rng = random.Random(13)
    rows = []  # the copies first: fresh sentences from few words repeat some, and a text's first row is its match
    for i in EXACT:
        tags = [t if i not in OTHER_GOLD or t.endswith("PER") else "O" for t in source[i]["tags"]]
        rows.append({"tokens": source[i]["tokens"], "tags": tags})
    rows += [{"tokens": source[i]["tokens"] + ["extra"], "tags": source[i]["tags"] + ["O"]} for i in NEAR]
    rows += [{k: v for k, v in sentence(rng, 1000 + i).items() if k in ("tokens", "tags")} for i in range(150)]
    path = folder / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))

    def bad(frame):
        frame.at[120, "tags"] = frame.at[120, "tags"][:-1]
        return frame

    return path, bad


TASKS = {"multilabel": (lambda f: multilabel_run(f)[0], multilabel_train),
         "regression": (lambda f: regression_run(f)[0], regression_train),
         "token-classification": (lambda f: token_run(f)[0], token_train)}


@pytest.mark.parametrize("task", sorted(TASKS))
def test_ray_leakage_and_shift_of_every_task_equal_the_in_process_ones(local_ray, tmp_path, monkeypatch, task):
    make_run, make_train = TASKS[task]
    run_path = make_run(tmp_path)
    train, _ = make_train(tmp_path)
    (frame, report), (ray_frame, ray_report) = both_engines(run_path, monkeypatch, train=str(train),
                                                            near_threshold=0.9)
    pd.testing.assert_frame_equal(frame, ray_frame)
    assert ray_stated(ray_report) == {"eval": {"rows": 300, "of": 300, "seed": 0},
                                      "train": {"rows": 167, "of": 167, "seed": 0}}
    assert ray_report == report
    hit = set(np.flatnonzero(ray_frame["in_train"].to_numpy(dtype=bool)).tolist())
    planted = set(EXACT) | set(NEAR) | {250, 251}  # the runs' rows 250.. copy rows 10..
    assert hit >= planted and (hit == planted or task == "token-classification")  # few words: fresh sentences repeat
    assert set(np.flatnonzero(ray_frame["train_label_differs"].to_numpy(dtype=bool))) >= set(OTHER_GOLD)
    assert report["leakage"]["n_near"] >= len(NEAR) and report["shift"]["n_train"] == 167
    assert report["shift"]["class_balance"]["labels"] and report["shift"]["domain"]["auc"] is not None


@pytest.mark.parametrize("task", sorted(TASKS))
def test_a_bad_training_file_is_the_same_error_under_both_engines(local_ray, tmp_path, monkeypatch, task):
    """A bad cell in the third block, the gold column missing, no rows."""
    make_run, make_train = TASKS[task]
    run_path = make_run(tmp_path)
    train, spoil = make_train(tmp_path)
    frame = pd.read_json(train, lines=True) if train.suffix == ".jsonl" else \
        pd.read_csv(train) if train.suffix == ".csv" else pd.read_parquet(train)
    gold = "tags" if task == "token-classification" else "label"
    monkeypatch.setattr("erroranalysis.engines.blocks.ROWS_PER_BLOCK", 64)
    for kind, bad_frame in (("cell", spoil(frame.copy())), ("column", frame.drop(columns=gold)),
                            ("empty", frame.iloc[:0])):
        bad = tmp_path / f"bad-{kind}{train.suffix}"
        if train.suffix == ".jsonl":
            bad_frame.to_json(bad, orient="records", lines=True)
        elif train.suffix == ".csv":
            bad_frame.to_csv(bad, index=False)
        else:
            bad_frame.to_parquet(bad, index=False, row_group_size=50)
        errors = []
        for engine in (None, Engine(engine="ray")):
            with pytest.raises(DataError) as caught:
                checks_run(run_path, CheckParams(train=str(bad), embedder="none"), engine=engine)
            errors.append(str(caught.value))
        assert errors[0] == errors[1] and "\n" not in errors[0] and str(bad) in errors[0]
        assert ("line 12" in errors[0]) == (kind == "cell") and (repr(gold) in errors[0]) == (kind != "empty")
    assert not (run_path / "checks.parquet").exists()
