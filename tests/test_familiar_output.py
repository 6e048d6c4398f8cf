"""Output people already know (issue 34): a token classifier is headlined by seqeval's entity-level micro F1, not
sentence accuracy, in `show`, `show --json`, `analyze --json` and the HTML report (the app's Overview already)."""

from __future__ import annotations

import json
import random

import pytest
from token_fixtures import sentence, write_sentences
from typer.testing import CliRunner

from erroranalysis.cli.app import app


def cli(*args, code: int = 0):
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exit_code == code, result.output
    return result


@pytest.fixture(scope="module")
def token_run(tmp_path_factory):
    """Tags made elsewhere, every other sentence's person read as an organization: sentence accuracy 0.5, while
    seqeval's entity micro F1 is higher."""
    root = tmp_path_factory.mktemp("tokens")
    rng = random.Random(3)
    rows = []
    for i in range(20):
        r = sentence(rng, i)
        rows.append({**r, "pred_tags": [t.replace("PER", "ORG") for t in r["tags"]] if i % 2 else list(r["tags"])})
    data = write_sentences(root / "preds.jsonl", rows=rows)
    out = root / "run"
    made = cli("analyze", "--predictions", data, "--out", out, "--task", "token-classification", "--id-column", "id",
               "--no-cluster", "--no-slices", "--no-data-checks", "--json")
    return {"out": out, "rows": rows, "json": json.loads(made.stdout), "root": root}


def test_a_token_run_is_headlined_by_seqeval_entity_micro_f1(token_run):
    from seqeval.metrics import f1_score

    expected = f1_score([r["tags"] for r in token_run["rows"]], [r["pred_tags"] for r in token_run["rows"]])
    made = token_run["json"]["headline"]
    assert made["name"] == "entity micro F1" and made["value"] == pytest.approx(expected)
    shown = json.loads(cli("show", token_run["out"], "--json").stdout)["headline"]
    assert shown == made and token_run["json"]["overall"]["accuracy"] == 0.5  # sentence accuracy stays in overall
    text = cli("show", token_run["out"]).stdout
    assert f"entity micro F1 {expected:.3f}" in text and "accuracy 0.500" not in text.split("\n")[1]
    cli("report", token_run["out"], "--out", token_run["root"] / "r.html")
    html = (token_run["root"] / "r.html").read_text(encoding="utf-8")
    overview = html.split('id="overview"')[1].split("</section>")[0]
    assert overview.index("entity micro F1") < overview.index("sentence accuracy")


def test_a_label_issue_never_suggests_the_label_the_example_has():
    import numpy as np

    from erroranalysis.datachecks.label_issues import find_label_issues

    labels = ["a", "b", "a", "c", "b", "c"] * 5
    rng = np.random.default_rng(0)
    probs = rng.dirichlet([1, 1, 1], size=len(labels))
    probs[:3] = [[0.9, 0.05, 0.05], [0.1, 0.8, 0.1], [0.6, 0.1, 0.3]]  # the model agrees with the given label
    issues = find_label_issues(labels, probs, ["a", "b", "c"])
    assert (issues["suggested_label"] != np.asarray(labels)).all()
    assert issues["suggested_label"].iloc[:3].tolist() == ["b", "a", "c"]  # the next most likely class


def test_cluster_exemplars_are_distinct_examples():
    import numpy as np
    import pandas as pd

    from erroranalysis.cluster import describe_clusters

    texts = ["refund never came"] * 4 + ["refund  never came", "broken screen on arrival", "late refund again",
                                         "refund denied twice"]
    failures = pd.DataFrame({"example_id": [f"e{i}" for i in range(8)], "text": texts, "label": "neg",
                             "pred": "pos"})
    vectors = np.ones((8, 4), dtype=np.float32)  # all as near the centre: duplicates would come first
    out = describe_clusters(failures, np.zeros(8, dtype=int), vectors=vectors, n_exemplars=4)
    assert out["exemplar_ids"].iloc[0] == ["e0", "e5", "e6", "e7"]
    spans = failures.assign(sentence_id=["s0", "s0", "s1", "s1", "s2", "s3", "s4", "s5"],
                            text=["John", "Smith", "John", "Acme", "Paris", "Acme", "Bob", "Ann"])
    out = describe_clusters(spans, np.zeros(8, dtype=int), vectors=vectors, n_exemplars=4)
    assert out["exemplar_ids"].iloc[0] == ["e0", "e2", "e4", "e5"]  # one span per sentence, same words allowed


def _report_rows(report: dict, names) -> dict:
    return {n: {"precision": report[n]["precision"], "recall": report[n]["recall"], "f1": report[n]["f1-score"],
                "support": int(report[n]["support"])} for n in names}


def _ours(rows) -> dict:
    return {r["label"]: {k: r[k] for k in ("precision", "recall", "f1", "support")} for r in rows}


def test_classification_averages_are_sklearns():
    import numpy as np
    from sklearn.metrics import classification_report, precision_recall_fscore_support

    from erroranalysis.metrics import compute_metrics
    from erroranalysis.metrics.averages import average_rows

    rng = np.random.default_rng(1)
    labels = ["a", "b", "c", "d"]
    gold = rng.choice(labels[:3], 200, p=[0.6, 0.3, 0.1])  # "d" is never gold: it is predicted only
    pred = np.where(rng.random(200) < 0.35, rng.choice(labels, 200), gold)
    ours = _ours(average_rows("classification", compute_metrics(gold, pred, labels, n_resamples=0)))
    expected = _report_rows(classification_report(gold, pred, output_dict=True, zero_division=0),
                            ["macro avg", "weighted avg"])
    p, r, f, _ = precision_recall_fscore_support(gold, pred, average="micro")
    expected["micro avg"] = {"precision": p, "recall": r, "f1": f, "support": 200}
    assert list(ours) == ["micro avg", "macro avg", "weighted avg"]
    for name, row in expected.items():
        assert ours[name] == pytest.approx(row), name


def test_multilabel_averages_are_sklearns_with_samples_avg():
    import numpy as np
    from sklearn.metrics import classification_report

    from erroranalysis.metrics.averages import average_rows
    from erroranalysis.metrics.multilabel import compute_multilabel_metrics

    rng = np.random.default_rng(2)
    t = (rng.random((120, 4)) < [0.5, 0.3, 0.2, 0.1]).astype(int)
    p = np.where(rng.random((120, 4)) < 0.2, 1 - t, t)
    ours = _ours(average_rows("multilabel", compute_multilabel_metrics(t, p, list("wxyz"), n_resamples=0)))
    names = ["micro avg", "macro avg", "weighted avg", "samples avg"]
    expected = _report_rows(classification_report(t, p, output_dict=True, zero_division=0), names)
    assert list(ours) == names
    for name in names:
        assert ours[name] == pytest.approx(expected[name]), name


def test_token_averages_are_seqevals_and_shown_everywhere(token_run):
    from seqeval.metrics import classification_report

    from erroranalysis.metrics.averages import average_rows
    from erroranalysis.rundir import Run

    rows = token_run["rows"]
    names = ["micro avg", "macro avg", "weighted avg"]
    expected = _report_rows(classification_report([r["tags"] for r in rows], [r["pred_tags"] for r in rows],
                                                  output_dict=True), names)
    ours = _ours(average_rows("token-classification", Run.open(token_run["out"]).metrics()))
    for name in names:
        assert ours[name] == pytest.approx(expected[name]), name
    text = cli("show", token_run["out"]).stdout
    table = text.split("Per class")[1].split("Confusion")[0]
    assert table.index("LOC") < table.index("micro avg") < table.index("macro avg") < table.index("weighted avg")
    micro = expected["micro avg"]
    shown = table.split("micro avg")[1].splitlines()[0].replace("│", " ").split()
    assert shown == [f"{micro['precision']:#.3g}", f"{micro['recall']:#.3g}", f"{micro['f1']:#.3g}",
                     f"{micro['support']:,}"]
    cli("report", token_run["out"], "--out", token_run["root"] / "r2.html")
    html = (token_run["root"] / "r2.html").read_text(encoding="utf-8")
    per_class = html.split('id="per-class"')[1].split("</section>")[0]
    assert per_class.index("micro avg") < per_class.index("macro avg") < per_class.index("weighted avg")


def test_rates_shown_are_rounded_json_keeps_precision():
    from erroranalysis.metrics.display import percent, rate

    assert [rate(0.78712), rate(0.012345), rate(1.0), rate(0.0), rate(None), rate(float("nan"))] == \
        ["0.787", "0.0123", "1.00", "0.00", "–", "–"]
    assert [percent(0.78712), percent(1), percent(None)] == ["78.7%", "100.0%", "–"]
