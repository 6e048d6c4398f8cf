"""Token classification end to end: `run` on a tiny BERT token classifier (random weights, real config) over
CoNLL-style sentences; word predictions against the model's own forward pass; metrics.json against seqeval on the
same tags (default and strict modes); the spans table against `classify_spans`; raw text with character spans; and
bad input refused in one line with exit 2 and nothing written."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from token_fixtures import TAGS, build_tiny_token_classifier, sentence, write_sentences
from typer.testing import CliRunner

from erroranalysis.cli.app import app
from erroranalysis.metrics import tokens as tm
from erroranalysis.rundir import Run, readers


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return build_tiny_token_classifier(tmp_path_factory.mktemp("tok") / "model")


@pytest.fixture(scope="module")
def run_dir(model_dir, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tokrun")
    data = write_sentences(folder / "eval.jsonl", n=30)
    out = folder / "run"
    result = CliRunner().invoke(app, ["run", "--model", str(model_dir), "--data", str(data), "--out", str(out),
                                      "--id-column", "id", "--no-cluster", "--json"])
    assert result.exit_code == 0, result.output
    return out


def _first_subtoken_tags(model_dir: Path, words: list[str]) -> list[str]:
    """The model's own forward pass on one sentence, each word read from its first sub-token."""
    import torch
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForTokenClassification.from_pretrained(model_dir).eval()
    enc = tok(words, is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**enc).logits[0]
    first = {}
    for pos, w in enumerate(enc.word_ids(0)):
        if w is not None and w not in first:
            first[w] = int(logits[pos].argmax())
    return [model.config.id2label[first[w]] for w in range(len(words))]


def test_run_detects_the_head_and_writes_sentences_and_spans(run_dir, model_dir):
    run = Run.open(run_dir)
    assert run.task == "token-classification" and run.manifest["tokens"]["scheme"] == "IOB2"
    preds = run.predictions()
    assert len(preds) == 30 and preds["example_id"].tolist()[0] == "s000"
    for row in preds.head(5).itertuples():
        assert list(row.pred_tags) == _first_subtoken_tags(model_dir, list(row.tokens))
    spans = readers.read_spans(run)
    for sid, group in spans.groupby("sentence_id"):
        row = preds.set_index("example_id").loc[sid]
        expected = tm.classify_spans(tm.spans_of(list(row.gold_tags), "IOB2"), tm.spans_of(list(row.pred_tags), "IOB2"))
        assert [(r["start"], r["end"], r["kind"]) for r in expected] == \
            list(zip(group["start"], group["end"], group["kind"]))
        assert row.correct == (group["kind"] == "correct").all()
    assert set(spans["kind"]) <= set(tm.KINDS) and (spans["correct"] == (spans["kind"] == "correct")).all()
    assert readers.read_hidden(run).shape == (len(spans), 32)
    assert run.manifest["stages"]["slices"]["status"] == "done"
    shown = CliRunner().invoke(app, ["show", str(run_dir)])
    assert shown.exit_code == 0 and "30 examples" in shown.output, shown.output


@pytest.mark.parametrize("mode", ["default", "strict"])
def test_metrics_match_seqeval(run_dir, mode):
    from seqeval.metrics import accuracy_score, classification_report
    from seqeval.scheme import IOB2

    run = Run.open(run_dir)
    preds, metrics = run.predictions(), run.metrics()
    gold = [list(t) for t in preds["gold_tags"]]
    pred = [list(t) for t in preds["pred_tags"]]
    kwargs = {"mode": "strict", "scheme": IOB2} if mode == "strict" else {}
    report = classification_report(gold, pred, output_dict=True, zero_division=0, **kwargs)
    ours = metrics["entities"][mode]
    for kind, scores in ours["per_type"].items():
        if kind in report:
            assert scores["f1"] == pytest.approx(report[kind]["f1-score"])
            assert scores["support"] == report[kind]["support"]
    for avg in ("micro", "macro", "weighted"):
        for m in ("precision", "recall", "f1"):
            assert ours[avg][m] == pytest.approx(report[f"{avg} avg"][m.replace("f1", "f1-score")])
    assert metrics["overall"]["token_accuracy"] == pytest.approx(accuracy_score(gold, pred))
    if mode == "default":
        assert metrics["overall"]["micro_f1"] == pytest.approx(report["micro avg"]["f1-score"])


def test_error_kind_counts_and_confusion(run_dir):
    run = Run.open(run_dir)
    metrics, spans = run.metrics(), readers.read_spans(run)
    assert metrics["error_kinds"] == {k: int((spans["kind"] == k).sum()) for k in tm.KINDS}
    matrix = np.array(metrics["confusion"]["matrix"])
    assert metrics["confusion"]["labels"] == ["LOC", "ORG", "PER", "O"]
    assert matrix.sum() == metrics["overall"]["n_words"]


@pytest.mark.parametrize("aggregation", ["mean", "max"])
def test_aggregation(model_dir, aggregation):
    import torch
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    from erroranalysis.infer.tokens import encode, load_token_classifier, predict

    words = ["Umbrella", "Incorporated", "hired", "Dmitri", "Kowalczyk", "in", "Lagos"]
    clf = load_token_classifier(model_dir, device="cpu")
    out = predict(clf, encode(clf.tokenizer, [words], 64), None, aggregation=aggregation)[0]
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForTokenClassification.from_pretrained(model_dir).eval()
    enc = tok(words, is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**enc).logits[0]
    ids = np.array(enc.word_ids(0), dtype=object)
    for w in range(len(words)):
        part = logits[[i for i, x in enumerate(ids) if x == w]]
        agg = part.mean(0) if aggregation == "mean" else part.max(0).values
        assert out["pred"][w] == int(agg.argmax())
        assert out["confidence"][w] == pytest.approx(float(torch.softmax(agg, -1).max()), rel=1e-4)


def _raw_rows(rows: list[dict]) -> list[dict]:
    """The same sentences as text with character spans."""
    out = []
    for r in rows:
        text, starts = "", []
        for w in r["tokens"]:
            starts.append(len(text) + (1 if text else 0))
            text = f"{text} {w}" if text else w
        spans = [{"start": starts[s], "end": starts[e - 1] + len(r["tokens"][e - 1]), "label": t}
                 for s, e, t in tm.spans_of(r["tags"], "IOB2")]
        out.append({"id": r["id"], "text": text, "spans": spans})
    return out


def test_raw_text_with_character_spans(model_dir, tmp_path):
    from erroranalysis import stages
    from erroranalysis.sources.table import DataOptions

    rng = random.Random(1)
    rows = [sentence(rng, i) for i in range(8)]
    data = tmp_path / "raw.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in _raw_rows(rows)))
    run = stages.run_token_classification(model_dir, data, tmp_path / "run", data_opts=DataOptions(id_column="id"),
                                          after=stages.AfterParams(checks=None, slices=None, cluster=None))
    preds = run.predictions()
    assert [list(t) for t in preds["gold_tags"]] == [r["tags"] for r in rows]
    assert [list(t) for t in preds["tokens"]] == [r["tokens"] for r in rows]
    spans = readers.read_spans(run)
    gold = spans[spans["source"] == "gold"]
    texts = preds.set_index("example_id")["text"]
    for row in gold.itertuples():
        assert texts[row.sentence_id][row.char_start:row.char_end] == row.text
    assert run.manifest["tokens"]["input"] == "text+spans"


BAD = [
    ({"id": "a", "tokens": ["Bob", "ran"], "tags": ["B-PER"]}, "1 tags for 2 tokens"),
    ({"id": "a", "tokens": ["Bob", "ran"], "tags": ["B-PER", "B-MISC"]}, "tag 'B-MISC' (token 2, 'ran')"),
    ({"id": "a", "tokens": ["Bob", "ran"], "tags": [1, 99]}, "tag 99 (token 2"),
    ({"id": "a", "tokens": "Bob ran", "tags": ["B-PER", "O"]}, "is not a non-empty list of words"),
    ({"id": "a", "text": "Bob ran", "spans": [{"start": 0, "end": 30, "label": "PER"}]}, "out of range"),
    ({"id": "a", "text": "Bob ran", "spans": [{"start": 0, "end": 3, "label": "MISC"}]}, "not an entity type"),
    ({"id": "a", "text": "Bob ran", "spans": [{"start": 0, "end": 3, "label": "PER"},
                                              {"start": 2, "end": 7, "label": "LOC"}]}, "overlap"),
    ({"id": "a", "words": ["Bob"], "labels": ["O"]}, "name them with --tokens-column"),
    ({"id": "a", "text": "Bob ran"}, "write [] for a text without entities"),
]


@pytest.mark.parametrize("row,needle", BAD)
def test_bad_input_is_one_line_and_exit_2(model_dir, tmp_path, row, needle):
    data = tmp_path / "bad.jsonl"
    good = {"id": "z", "tokens": ["Paris"], "tags": ["B-LOC"]} if "tokens" in row else \
        {"id": "z", "text": "Paris", "spans": [{"start": 0, "end": 5, "label": "LOC"}]}
    data.write_text(("" if "words" in row else json.dumps(good) + "\n") + json.dumps(row) + "\n")
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["run", "--model", str(model_dir), "--data", str(data), "--out", str(out),
                                      "--id-column", "id", "--task", "token-classification"])
    assert result.exit_code == 2, result.output
    message = result.output.strip()
    assert message.startswith("error:") and "\n" not in message and "Traceback" not in message
    assert needle in message, message
    if "tokens" in row or "text" in row:
        assert "line 2" in message
    assert not out.exists()


def test_refused_scheme_and_task_mismatch(tmp_path, model_dir):
    mixed = build_tiny_token_classifier(tmp_path / "mixed", tags=["O", "B-PER", "NN"])
    data = write_sentences(tmp_path / "eval.jsonl", n=3)
    for model, extra, needle in ((mixed, [], "mix prefixed tags"),
                                 (model_dir, ["--task", "classification"], "--task classification was given"),
                                 (model_dir, ["--task", "token-classification", "--tag-scheme", "plain"],
                                  "not plain")):
        result = CliRunner().invoke(app, ["run", "--model", str(model), "--data", str(data), "--out",
                                          str(tmp_path / "run"), *extra])
        assert result.exit_code == 2 and needle in result.output, result.output
        assert not (tmp_path / "run").exists()


def test_tags_as_ids_and_iobes_model(tmp_path):
    iobes = ["O", "B-PER", "I-PER", "E-PER", "S-PER", "B-LOC", "I-LOC", "E-LOC", "S-LOC", "B-ORG", "I-ORG", "E-ORG",
             "S-ORG"]
    model = build_tiny_token_classifier(tmp_path / "iobes", tags=iobes)
    rng = random.Random(2)
    rows = []
    for i in range(6):
        r = sentence(rng, i)
        tags = tm.encode_spans(len(r["tokens"]), tm.spans_of(r["tags"], "IOB2"), "IOBES")
        rows.append({**r, "tags": [iobes.index(t) for t in tags]})
    data = write_sentences(tmp_path / "eval.jsonl", rows=rows)
    from erroranalysis import stages
    from erroranalysis.sources.table import DataOptions

    run = stages.run_token_classification(model, data, tmp_path / "run", data_opts=DataOptions(id_column="id"),
                                          after=stages.AfterParams(checks=None, slices=None, cluster=None))
    assert run.manifest["tokens"]["scheme"] == "IOBES"
    preds = run.predictions()
    assert [list(t) for t in preds["gold_tags"]] == [[iobes[k] for k in r["tags"]] for r in rows]
    assert run.metrics()["overall"]["n_gold_spans"] == sum(len(tm.spans_of(list(g), "IOBES"))
                                                           for g in preds["gold_tags"])


@pytest.mark.slow
def test_planted_type_confusion_is_found_as_a_slice_and_a_cluster(tmp_path):
    """A model fine-tuned where places after 'flew from' are tagged ORG reads them so in the eval set (gold LOC):
    the slices find prev_word = from, and one cluster holds those LOC -> ORG spans."""
    from token_fixtures import fine_tune, planted_sentence

    from erroranalysis import stages
    from erroranalysis.sources.table import DataOptions

    rng = random.Random(0)
    model = build_tiny_token_classifier(tmp_path / "model")
    fine_tune(model, [planted_sentence(rng, i, flown_from_as="ORG") for i in range(180)])
    data = write_sentences(tmp_path / "eval.jsonl", rows=[planted_sentence(rng, i) for i in range(90)])
    run = stages.run_token_classification(
        model, data, tmp_path / "run", data_opts=DataOptions(id_column="id"),
        after=stages.AfterParams(checks=None, cluster=stages.ClusterParams(layout="pca", min_cluster_size=5)))
    spans = readers.read_spans(run)
    planted = spans[(spans["prev_word"] == "from") & (spans["source"] == "gold")]
    assert len(planted) == 30 and (planted["kind"] == "wrong_type").mean() > 0.9
    assert (planted["pred_type"] == "ORG").mean() > 0.9
    others = spans[spans["prev_word"] != "from"]
    assert (others["kind"] == "correct").mean() > 0.9, "the model learned the other contexts"

    slices, _ = readers.read_slices(run)
    found = slices[slices["description"].str.contains("prev_word") & slices["description"].str.contains("from")]
    assert len(found) and found["error_rate"].max() > 0.9, slices["description"].tolist()

    assignments = readers.read_assignments(run)
    failing = assignments[assignments["failure"]].merge(spans[["example_id", "prev_word", "label", "pred"]],
                                                        on="example_id")
    planted_ids = set(planted.loc[planted["kind"] == "wrong_type", "example_id"])
    top = failing[failing["example_id"].isin(planted_ids)]["cluster_id"].value_counts()
    best = int(top.index[0])
    assert top.iloc[0] >= 0.8 * len(planted_ids) and best >= 0
    clusters = readers.read_clusters(run).set_index("cluster_id")
    assert "LOC" in str(clusters.loc[best, "top_confusions"]) and "ORG" in str(clusters.loc[best, "top_confusions"])


def test_python_api_and_cli_take_the_same_parameters(model_dir, tmp_path):
    import erroranalysis as ea

    data = write_sentences(tmp_path / "eval.jsonl", n=6)
    run = ea.run(model_dir, data, out=tmp_path / "api", id="id", tokens={"aggregation": "mean", "span_mode": "strict"},
                 checks=None, slices=None, cluster=None)
    manifest = Run.open(tmp_path / "api").manifest
    assert manifest["task"] == "token-classification"
    assert manifest["tokens"]["aggregation"] == "mean" and manifest["tokens"]["span_mode"] == "strict"
    assert manifest["stages"]["infer"]["params"]["aggregation"] == "mean"
    assert run.metrics.raw["overall"]["span_mode"] == "strict"
    out = tmp_path / "cli"
    result = CliRunner().invoke(app, ["run", "--model", str(model_dir), "--data", str(data), "--out", str(out),
                                      "--id-column", "id", "--aggregation", "mean", "--span-mode", "strict",
                                      "--no-slices", "--no-cluster", "--json"])
    assert result.exit_code == 0, result.output
    assert Run.open(out).manifest["tokens"] == manifest["tokens"]
    bad = CliRunner().invoke(app, ["run", "--model", str(model_dir), "--data", str(data), "--out", str(out) + "2",
                                   "--aggregation", "median"])
    assert bad.exit_code == 2 and "--aggregation" in bad.output


def test_detection_names_token_classification():
    from erroranalysis import tasks
    from erroranalysis.core.errors import ModelError

    config = {"architectures": ["BertForTokenClassification"], "id2label": dict(enumerate(TAGS))}
    assert tasks.detect(config) == "token-classification"
    with pytest.raises(ModelError, match="--task multilabel was given"):
        tasks.detect(config, "multilabel")


def test_train_marks_seen_surfaces_and_export_report_work(model_dir, tmp_path):
    from erroranalysis import stages
    from erroranalysis.sources.table import DataOptions

    rng = random.Random(5)
    rows = [sentence(rng, i) for i in range(10)]
    train = write_sentences(tmp_path / "train.jsonl", rows=[{**r, "id": f"t{i}"} for i, r in enumerate(rows[:5])])
    data = write_sentences(tmp_path / "eval.jsonl", rows=rows)
    run = stages.run_token_classification(model_dir, data, tmp_path / "run", data_opts=DataOptions(id_column="id"),
                                          train=train, after=stages.AfterParams(checks=None, cluster=None))
    spans = readers.read_spans(run)
    gold = spans[spans["source"] == "gold"]
    seen = {" ".join(r["tokens"][s:e]) for r in rows[:5] for s, e, _ in tm.spans_of(r["tags"], "IOB2")}
    assert (gold["seen_in_train"] == np.where(gold["text"].isin(seen), "seen", "unseen")).all()
    assert "seen_in_train" in run.manifest["data"]["metadata_columns"]
    for args in (["export", str(run.path), "--format", "csv"], ["report", str(run.path), "--out",
                                                                  str(tmp_path / "r.html")]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
    assert (tmp_path / "r.html").stat().st_size > 0


def test_analyze_predicted_tags_made_elsewhere(tmp_path):
    """`analyze --task token-classification`: gold and predicted tags in one file, no model; the same tables and
    metrics as `run` (checked against seqeval), and a predicted-tags column that does not fit refused in one line."""
    from seqeval.metrics import f1_score

    rng = random.Random(3)
    rows = []
    for i in range(20):
        r = sentence(rng, i)
        pred = list(r["tags"])
        if i % 2:  # every other sentence: the person read as an organization
            pred = [t.replace("PER", "ORG") for t in pred]
        rows.append({**r, "pred_tags": pred})
    data = write_sentences(tmp_path / "preds.jsonl", rows=rows)
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["analyze", "--predictions", str(data), "--out", str(out), "--task",
                                      "token-classification", "--id-column", "id", "--no-cluster", "--json"])
    assert result.exit_code == 0, result.output
    run = Run.open(out)
    assert run.task == "token-classification" and run.manifest["stages"]["load_predictions"]["status"] == "done"
    metrics = run.metrics()
    assert metrics["overall"]["micro_f1"] == pytest.approx(f1_score([r["tags"] for r in rows],
                                                                    [r["pred_tags"] for r in rows]))
    spans = readers.read_spans(run)
    wrong = spans[spans["kind"] == "wrong_type"]
    assert len(wrong) == 10 and set(zip(wrong["label"], wrong["pred"])) == {("PER", "ORG")}
    assert readers.read_hidden(run) is None

    rows[4]["pred_tags"] = rows[4]["pred_tags"][:-1]
    bad = write_sentences(tmp_path / "bad.jsonl", rows=rows)
    result = CliRunner().invoke(app, ["analyze", "--predictions", str(bad), "--out", str(tmp_path / "bad"), "--task",
                                      "token-classification"])
    assert result.exit_code == 2 and "line 5, column 'pred_tags'" in result.output and "tags for" in result.output
    assert not (tmp_path / "bad").exists()


def test_python_analyze_of_a_dataframe(tmp_path):
    import pandas as pd

    import erroranalysis as ea

    rng = random.Random(4)
    rows = [sentence(rng, i) for i in range(6)]
    frame = pd.DataFrame([{**r, "pred_tags": r["tags"]} for r in rows])
    run = ea.analyze(frame, out=tmp_path / "run", id="id", task="token-classification", checks=None, slices=None,
                     cluster=None)
    assert run.metrics.raw["overall"]["micro_f1"] == 1.0 and run.metrics.raw["overall"]["n_error_spans"] == 0
