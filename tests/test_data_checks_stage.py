"""The checks stage over a run directory, and the `erroranalysis checks` command."""

import hashlib
import json

import numpy as np
import pandas as pd
import pytest
from fake_runs import inferred_run
from typer.testing import CliRunner

from erroranalysis.cli.app import app
from erroranalysis.core import schemas
from erroranalysis.core.errors import DataError, ParameterError, RunError
from erroranalysis.rundir import CHECKS, CHECKS_JSON
from erroranalysis.rundir.readers import read_checks, read_checks_report, read_predictions
from erroranalysis.stages.data_checks import checks_run, label_issue_share

LABELS = ["business", "sport", "tech"]


def bow_embed(texts, dim=128):
    out = np.zeros((len(texts), dim), dtype=np.float32)
    for row, text in enumerate(texts):
        for word in str(text).lower().replace(".", " ").split():
            seed = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "little")
            out[row] += np.random.default_rng(seed).normal(size=dim)
    return out


def sentence(rng, label, n=15):
    return " ".join([label] + [f"{label[:2]}{i}" for i in rng.integers(0, 3000, n)])


def make_run(path, *, n=300, n_flips=20, probs=True, seed=0):
    """A run whose probabilities follow the true labels; `n_flips` given labels are flipped; rows 0/1 are
    exact copies with different labels; the texts carry their true label's words."""
    rng = np.random.default_rng(seed)
    true = rng.integers(0, 3, n)
    texts = [sentence(rng, LABELS[t]) for t in true]
    texts[1] = texts[0].upper() + "!"
    true[1] = true[0]
    logits = rng.normal(0, 1, (n, 3))
    logits[np.arange(n), true] += 4
    p = (np.exp(logits) / np.exp(logits).sum(1, keepdims=True)).astype(np.float32)
    given = true.copy()
    flipped = rng.choice(np.arange(2, n), n_flips, replace=False)
    given[flipped] = (true[flipped] + 1) % 3
    given[1] = (true[0] + 1) % 3  # the copy carries another label
    names = np.array(LABELS, dtype=object)
    pred = names[p.argmax(1)]
    frame = pd.DataFrame({
        "example_id": [f"ex{i}" for i in range(n)], "text": texts, "label": names[given], "pred": pred,
        "correct": names[given] == pred, "confidence": p.max(1), "loss": np.float32(0.1),
        "n_tokens": np.int32(16), "truncated": False})
    run = inferred_run(path, frame, labels=LABELS, probs=p if probs else None,
                       data={"columns": {"text": "body", "label": "topic", "id": None}, "metadata_columns": []})
    return run, set(flipped.tolist()) | {1}, texts, names[true]


def write_train(path, texts, labels, text_column="body", label_column="topic"):
    with open(path, "w") as f:
        for t, y in zip(texts, labels):
            f.write(json.dumps({text_column: t, label_column: y}) + "\n")
    return path


def test_checks_without_train(tmp_path):
    run, flipped, _, _ = make_run(tmp_path / "run")
    summary = checks_run(run.path, embedder=bow_embed)
    table = read_checks(run)
    assert list(table.columns) == list(schemas.CHECKS.columns)
    assert table["example_id"].tolist() == [f"ex{i}" for i in range(300)]
    top = set(table.sort_values("label_issue_score", ascending=False)["example_id"].head(21))
    assert len(top & {f"ex{i}" for i in flipped}) >= 17
    assert table["label_issue"].notna().all() and table["label_issue"].sum() >= 15
    assert table.loc[0, "duplicate_group"] == table.loc[1, "duplicate_group"] == 0
    assert table.loc[0, "duplicate_conflict"] and table.loc[1, "duplicate_kind"] == "exact"
    assert table["in_train"].isna().all() and table["train_similarity"].isna().all()
    report = read_checks_report(run)
    assert report["leakage"] is None and report["shift"] is None
    assert report["label_issues"]["available"] and len(report["label_issues"]["top"]) == 20
    checks = {f["check"] for f in report["findings"]}
    assert {"label_issues", "duplicate_conflicts", "duplicates"} <= checks
    assert summary["n_label_issues"] == int(table["label_issue"].sum()) and summary["n_in_train"] is None
    stage = run.manifest["stages"]["checks"]
    assert stage["status"] == "done" and stage["params"]["train"] is None
    assert stage["params"]["embedder"] == "bow_embed" and stage["n_conflict_groups"] == 1


def test_checks_with_train_find_leakage_and_shift(tmp_path):
    run, _, texts, true = make_run(tmp_path / "run")
    rng = np.random.default_rng(5)
    train_texts = [sentence(rng, "business") for _ in range(150)] + [sentence(rng, "sport") for _ in range(20)]
    train_labels = ["business"] * 150 + ["sport"] * 20
    train_texts += [texts[10], texts[11] + " extra"]           # an exact and a near copy of eval rows
    train_labels += [true[10], "tech" if true[11] != "tech" else "sport"]
    train = write_train(tmp_path / "train.jsonl", train_texts, train_labels)
    summary = checks_run(run.path, train=train, embedder=bow_embed, near_threshold=0.9)
    table = read_checks(run)
    assert table["in_train"].sum() == 2 and table.loc[10, "in_train"] and table.loc[11, "in_train"]
    assert table.loc[10, "train_id"] == "170" and table.loc[10, "train_similarity"] == 1.0
    assert table.loc[11, "train_label_differs"] and not table.loc[10, "train_label_differs"]
    assert pd.isna(table.loc[12, "train_id"])
    report = read_checks_report(run)
    assert report["leakage"]["n_exact"] == 1 and report["leakage"]["n_near"] == 1
    assert report["leakage"]["examples"][0]["example_id"] == "ex11"  # label conflicts first
    shift = report["shift"]
    assert shift["class_balance"]["only_in_eval"] == ["tech"]
    assert shift["domain"]["least_like_train"][0]["example_id"].startswith("ex")
    checks = {f["check"]: f for f in report["findings"]}
    assert {"leakage", "leakage_label_conflict", "label_unseen_in_train", "class_balance_shift"} <= set(checks)
    assert checks["leakage"]["severity"] == "warning"  # 2 of 300 = 0.7% < 1%
    assert summary["n_in_train"] == 2 and summary["domain_auc"] is not None
    assert run.manifest["stages"]["checks"]["params"]["train"] == str(train.resolve())


def test_run_without_probabilities(tmp_path):
    run, _, _, _ = make_run(tmp_path / "run", probs=False)
    summary = checks_run(run.path, embedder="none")
    table = read_checks(run)
    assert table["label_issue_score"].isna().all() and table["label_issue"].isna().all()
    assert summary["n_label_issues"] is None
    assert any(f["check"] == "label_issues_skipped" for f in summary["findings"])
    assert table.loc[0, "duplicate_group"] == 0 and (table["duplicate_group"] >= 0).sum() == 2


def test_train_with_other_columns_is_one_line_error_and_writes_nothing(tmp_path):
    run, _, texts, true = make_run(tmp_path / "run")
    train = write_train(tmp_path / "train.jsonl", texts[:5], true[:5], text_column="text", label_column="label")
    with pytest.raises(DataError) as info:
        checks_run(run.path, train=train, embedder="none")
    message = str(info.value)
    assert "\n" not in message and str(train) in message
    assert "'body', 'topic'" in message and "--train-text-column" in message
    assert not run.has(CHECKS) and not run.has(CHECKS_JSON)
    assert "checks" not in run.manifest["stages"]
    # naming the columns fixes it
    checks_run(run.path, train=train, embedder="none", train_text_column="text", train_label_column="label")
    assert read_checks(run)["in_train"].sum() == 5


def test_integer_train_labels_map_onto_the_run_labels(tmp_path):
    run, _, texts, true = make_run(tmp_path / "run", n=30, n_flips=2)
    ids = [str(LABELS.index(y)) for y in true[:6]]
    train = write_train(tmp_path / "train.jsonl", texts[:6], ids)
    checks_run(run.path, train=train, embedder="none")
    table = read_checks(run)
    assert table["in_train"].sum() == 6
    report = read_checks_report(run)
    assert not report["shift"]["class_balance"]["only_in_train"]


def test_bad_parameters_and_runs(tmp_path):
    run, _, _, _ = make_run(tmp_path / "run", n=30, n_flips=2)
    with pytest.raises(ParameterError, match="embedder='bert' is invalid"):
        checks_run(run.path, embedder="bert")
    with pytest.raises(ParameterError, match="near_threshold=0 is invalid"):
        checks_run(run.path, near_threshold=0)
    with pytest.raises(DataError, match="no such file"):
        checks_run(run.path, train=tmp_path / "missing.jsonl", embedder="none")
    with pytest.raises(RunError, match="no such run directory"):
        checks_run(tmp_path / "nope")
    assert "checks" not in run.manifest["stages"]
    frame = read_predictions(run)
    short = inferred_run(tmp_path / "short", frame, labels=LABELS, probs=np.ones((5, 3), dtype=np.float32) / 3)
    with pytest.raises(RunError, match=r"shape \(5, 3\), expected \(30, 3\)"):
        checks_run(short.path, embedder="none")
    nan = np.full((30, 3), 1 / 3, dtype=np.float32)
    nan[4, 1] = np.nan
    with_nan = inferred_run(tmp_path / "nan", frame, labels=LABELS, probs=nan)
    with pytest.raises(DataError, match="row 4, class 'sport': probability nan is not a finite number"):
        checks_run(with_nan.path, embedder="none")
    assert "checks" not in with_nan.manifest["stages"]


def test_a_failing_stage_is_marked_failed_and_keeps_old_files(tmp_path):
    run, _, _, _ = make_run(tmp_path / "run", n=30, n_flips=2)
    checks_run(run.path, embedder="none")
    before = run.file(CHECKS).read_bytes()

    def broken(texts):
        raise RuntimeError("embedder crashed")

    with pytest.raises(RuntimeError):
        checks_run(run.path, embedder=broken)
    assert run.manifest["stages"]["checks"]["status"] == "failed"
    assert run.file(CHECKS).read_bytes() == before
    assert not list(run.path.glob(".*.tmp")) and not any((run.path / ".staging").iterdir())


def test_label_issue_share():
    checks = pd.DataFrame({"example_id": ["a", "b", "c", "d"],
                           "label_issue": pd.array([True, False, None, True], dtype="boolean")})
    assert label_issue_share(checks, ["a", "b"]) == 0.5
    assert label_issue_share(checks, ["a", "c", "d"]) == 1.0
    assert np.isnan(label_issue_share(checks, ["c"]))
    assert np.isnan(label_issue_share(checks, []))
    assert np.isnan(label_issue_share(checks, ["zzz"]))


def test_cli(tmp_path):
    run, _, texts, true = make_run(tmp_path / "run", n=60, n_flips=4)
    train = write_train(tmp_path / "train.jsonl", texts[:3], true[:3])
    result = CliRunner().invoke(app, ["data-checks", str(run.path), "--train", str(train), "--check-embedder", "none"])
    assert result.exit_code == 0, result.output
    output = " ".join(result.output.split())
    assert "3 also in train" in output and "ERROR 3 eval examples (5.0%) also appear" in output
    assert run.has(CHECKS)
    bad = write_train(tmp_path / "bad.jsonl", texts[:3], true[:3], text_column="sentence")
    result = CliRunner().invoke(app, ["data-checks", str(run.path), "--train", str(bad), "--check-embedder", "none"])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "'body'" in lines[0]
    result = CliRunner().invoke(app, ["data-checks", str(run.path), "--check-embedder", "x"])
    assert result.exit_code == 2 and "--check-embedder 'x' is invalid" in result.output


def test_one_class_with_probabilities_skips_label_issues_and_reads_typed_flags(tmp_path):
    frame = pd.DataFrame({"example_id": [f"e{i}" for i in range(6)], "text": [f"t {i}" for i in range(6)],
                          "label": ["a"] * 6, "pred": ["a"] * 6})
    run = inferred_run(tmp_path / "one", frame, labels=["a"], probs=np.ones((6, 1), dtype=np.float32))
    summary = checks_run(run.path, embedder="none")
    assert summary["n_label_issues"] is None
    assert read_checks_report(run)["label_issues"]["available"] is False
    assert str(read_checks(run)["label_issue"].dtype) == "boolean"


def test_neighbours_labels_find_a_flip_the_model_is_confident_about(tmp_path):
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(3, 16)) * 5
    n = 90
    group = np.arange(n) % 3
    hidden = (centres[group] + rng.normal(size=(n, 16))).astype(np.float32)
    given = np.array(LABELS, dtype=object)[group]
    given[7] = LABELS[(group[7] + 1) % 3]  # flipped, and the model agrees with the wrong label (it learned it)
    probs = np.full((n, 3), 0.05, dtype=np.float32)
    probs[np.arange(n), [LABELS.index(g) for g in given]] = 0.9
    frame = pd.DataFrame({"example_id": [f"e{i}" for i in range(n)], "text": [f"text {i}" for i in range(n)],
                          "label": given, "pred": given})
    run = inferred_run(tmp_path / "r", frame, labels=LABELS, probs=probs, hidden=hidden)
    checks_run(run.path, embedder="hidden")
    scores = read_checks(run)["label_issue_score"].to_numpy()
    assert int(np.argmax(scores)) == 7
    assert read_checks_report(run)["label_issues"]["neighbors"] == {"weight": 0.5, "k": 20, "vectors": "hidden"}
    checks_run(run.path, embedder="hidden", label_issue_neighbors=0.0)  # the model's confidence alone misses it
    alone = read_checks(run)["label_issue_score"].to_numpy()
    assert alone[7] == pytest.approx(alone.min(), abs=1e-6)
