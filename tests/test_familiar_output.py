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
