"""`run --task token-classification --engine ray`: the workers read the eval set in blocks (a JSONL file through
their Parquet copy), check, tokenize and predict them on Ray Data actors (a real local Ray, `ray.init(num_cpus=2)`)
and write the shards; the run has the in-process run's sentences, spans, metrics and span vectors, and a bad cell
in a later block the in-process one-line error. With `--train` the workers read the training file in blocks too (a
JSONL file through its copy; a Parquet file as it is, on S3: tests/test_ray_cluster.py): the same `seen_in_train`
marks, the same error for a bad cell."""

from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pytest
from token_fixtures import build_tiny_token_classifier, sentence, write_sentences
from typer.testing import CliRunner

from erroranalysis.cli.app import app
from erroranalysis.core.errors import DataError
from erroranalysis.engines import Engine
from erroranalysis.rundir import HIDDEN, Run, readers
from erroranalysis.sources.table import DataOptions
from erroranalysis.stages import AfterParams, TokenParams, run_token_classification

AFTER = AfterParams(checks=None, slices=None, cluster=None)


@pytest.mark.slow
def test_ray_gives_the_in_process_token_run(local_ray, tmp_path, monkeypatch):
    """A JSONL file of words and tags through the CLI (`run --engine ray` takes a token classifier; `--train` is the
    data checks' option, which a token run then skips), on two actors. A Parquet file of raw text and spans (the
    words and tags made on the workers) is tests/test_ray_cluster.py's, on S3."""
    from erroranalysis.engines import blocks
    from erroranalysis.stages import tokens as tokens_stage

    monkeypatch.setattr(blocks, "ROWS_PER_BLOCK", 16)  # the training file's 30 sentences in two blocks
    model = build_tiny_token_classifier(tmp_path / "model")
    data = write_sentences(tmp_path / "eval.jsonl", n=40)
    train = write_sentences(tmp_path / "train.jsonl", n=30, seed=1)
    opts, tokens = DataOptions(id_column="id"), TokenParams(device="cpu", batch_size=8)
    here = run_token_classification(model, data, tmp_path / "local", data_opts=opts, token_opts=tokens, after=AFTER,
                                    train=train)

    def whole(*args, **kwargs):
        raise AssertionError("the driver read a file whole under --engine ray")

    monkeypatch.setattr("erroranalysis.stages.tokens.read_sentences", whole)  # the training file: the workers'
    after_predictions, engines = tokens_stage.after_predictions, []

    def after(*args, engine=None, **kwargs):  # the stages after inference on the blocks too, under Ray
        engines.append(engine)
        return after_predictions(*args, engine=engine, **kwargs)

    monkeypatch.setattr(tokens_stage, "after_predictions", after)
    # 2 actors, 2 blocks each: 10 sentences a block, batched by length within each block
    out = CliRunner().invoke(app, ["run", "--model", str(model), "--data", str(data), "--id-column", "id",
                                   "--out", str(tmp_path / "ray"), "--engine", "ray", "--ray-actors", "2",
                                   "--ray-blocks-per-actor", "2", "--device", "cpu", "--batch-size", "8",
                                   "--train", str(train), "--no-slices", "--no-cluster", "--json"])
    assert out.exit_code == 0, out.output
    there = Run.open(tmp_path / "ray")
    assert there.task == "token-classification"
    assert there.state("infer")["params"]["engine"] == "ray" and there.state("infer")["read_by"] == "workers"
    assert [e.engine for e in engines] == ["ray"]
    assert there.manifest["data"] == here.manifest["data"] and there.manifest["tokens"] == here.manifest["tokens"]
    a, b = readers.read_predictions(here), readers.read_predictions(there)
    assert len(a) == 40 and a["example_id"].tolist() == b["example_id"].tolist()
    assert a["pred_tags"].map(list).tolist() == b["pred_tags"].map(list).tolist()
    assert a["correct"].tolist() == b["correct"].tolist() and (~a["correct"]).any()
    np.testing.assert_allclose(a["loss"], b["loss"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(a["confidence"], b["confidence"], rtol=1e-4, atol=1e-5)
    sa, sb = readers.read_spans(here), readers.read_spans(there)
    pd.testing.assert_frame_equal(sa.drop(columns=["loss", "confidence"]), sb.drop(columns=["loss", "confidence"]))
    assert set(sb["seen_in_train"]) == {"seen", "unseen"}  # the training surfaces arrived, and not all of them match
    assert (there.path / HIDDEN).is_dir()  # the workers' shards
    np.testing.assert_allclose(here.hidden_states(), there.hidden_states(), rtol=1e-4, atol=1e-5)
    assert Run.open(here.path).metrics()["overall"] == Run.open(there.path).metrics()["overall"]


@pytest.mark.slow
@pytest.mark.parametrize("bad", ["tags", "id", "train"])
def test_a_bad_cell_in_a_later_block_is_the_in_process_error(local_ray, tmp_path, monkeypatch, bad):
    from erroranalysis.engines import blocks as engine_blocks
    from erroranalysis.sources import blocks

    monkeypatch.setattr(blocks, "HEAD_ROWS", 4)  # the driver checks rows 1-4; the bad row is a worker's
    monkeypatch.setattr(engine_blocks, "ROWS_PER_BLOCK", 6)  # the training file's blocks, as the eval set's
    model = build_tiny_token_classifier(tmp_path / "model")
    rng = random.Random(0)
    rows = [sentence(rng, i) for i in range(24)]
    train = None
    if bad == "tags":
        rows[20]["tags"] = rows[20]["tags"][:-1]  # line 21, in the fourth block of six rows
    elif bad == "id":
        rows[19]["id"] = rows[7]["id"]  # the same id in the second and fourth blocks
    else:  # the training file's line 21, in the fourth block a worker reads of its copy
        train_rows = [sentence(rng, i) for i in range(24)]
        train_rows[20]["tags"] = train_rows[20]["tags"][:-1]
        train = write_sentences(tmp_path / "train.jsonl", rows=train_rows)
    data = write_sentences(tmp_path / "eval.jsonl", rows=rows)
    opts, tokens = DataOptions(id_column="id"), TokenParams(device="cpu", batch_size=8)
    messages = []
    # one actor (each imports torch) and four blocks of six rows, as two actors with two blocks each would cut them
    for name, engine in (("local", Engine()), ("ray", Engine(engine="ray", concurrency=1, blocks_per_actor=4))):
        with pytest.raises(DataError) as caught:
            run_token_classification(model, data, tmp_path / name, data_opts=opts, token_opts=tokens, after=AFTER,
                                     engine=engine, train=train)
        messages.append(str(caught.value))
    needle = "line 20, column 'id'" if bad == "id" else "line 21, column 'tags'"
    assert messages[0] == messages[1] and needle in messages[0], messages
    assert messages[0].startswith(str(tmp_path / ("train.jsonl" if bad == "train" else "eval.jsonl"))), messages


def test_a_block_without_spans_writes_the_folders_column_types(tmp_path):
    """A block whose sentences have no gold or predicted span writes a spans shard of the same Arrow types as the
    others: read as one folder (its schema from the first shard), `correct` stays boolean and `confidence` a float."""
    from erroranalysis.stages.tokens import span_frame
    from erroranalysis.stages.tokens_ray import write_table

    model = build_tiny_token_classifier(tmp_path / "model")
    data = write_sentences(tmp_path / "eval.jsonl", n=12)
    opts, tokens = DataOptions(id_column="id"), TokenParams(device="cpu", batch_size=8)
    run = run_token_classification(model, data, tmp_path / "local", data_opts=opts, token_opts=tokens, after=AFTER)
    spans = readers.read_spans(run)
    assert len(spans)
    folder = tmp_path / "spans.parquet"  # no metadata columns to cast to the eval file's types: no schema, sources
    write_table(folder, 0, span_frame([], list(spans.columns)), None, {})  # the first block: no span
    write_table(folder, 12, spans, None, {})
    both = pd.read_parquet(folder)
    for column in ("correct", "truncated", "confidence", "loss", "start", "end"):
        assert both[column].dtype == spans[column].dtype, column
    assert both["correct"].tolist() == spans["correct"].tolist()
