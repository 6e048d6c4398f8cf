"""`run --task token-classification --engine ray`: the workers read the eval set in blocks (a JSONL file through
their Parquet copy), check, tokenize and predict them on Ray Data actors (a real local Ray, `ray.init(num_cpus=2)`)
and write the shards; the run has the in-process run's sentences, spans, metrics and span vectors, and a bad cell
in a later block the in-process one-line error."""

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


def _as_text_with_spans(path, out):
    """The sentences of JSONL file `path` as a Parquet file of texts with character spans."""
    from erroranalysis.metrics import tokens as tm

    rows = []
    for r in pd.read_json(path, lines=True).to_dict("records"):
        starts = np.cumsum([0] + [len(w) + 1 for w in r["tokens"]])
        spans = [{"start": int(starts[s]), "end": int(starts[e] - 1), "label": t}
                 for s, e, t in tm.spans_of(r["tags"], "IOB2")]
        rows.append({"id": r["id"], "text": " ".join(r["tokens"]), "spans": spans, "source": r["source"]})
    pd.DataFrame(rows).to_parquet(out, index=False)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("form", ["tokens.jsonl", "spans.parquet"])
def test_ray_gives_the_in_process_token_run(local_ray, tmp_path, form):
    model = build_tiny_token_classifier(tmp_path / "model")
    data = write_sentences(tmp_path / "eval.jsonl", n=40)
    if form == "spans.parquet":  # raw text: the words and tags made on the workers
        data = _as_text_with_spans(data, tmp_path / "eval.parquet")
    opts, tokens = DataOptions(id_column="id"), TokenParams(device="cpu", batch_size=8)
    here = run_token_classification(model, data, tmp_path / "local", data_opts=opts, token_opts=tokens, after=AFTER)
    # 2 actors, 2 blocks each: 10 sentences a block, batched by length within each block; the JSONL file's run
    # through the CLI (`run --engine ray` takes a token classifier), the Parquet file's through the API
    if form == "tokens.jsonl":
        out = CliRunner().invoke(app, ["run", "--model", str(model), "--data", str(data), "--id-column", "id",
                                       "--out", str(tmp_path / "ray"), "--engine", "ray", "--ray-actors", "2",
                                       "--ray-blocks-per-actor", "2", "--device", "cpu", "--batch-size", "8",
                                       "--no-data-checks", "--no-slices", "--no-cluster", "--json"])
        assert out.exit_code == 0, out.output
        there = Run.open(tmp_path / "ray")
        assert there.task == "token-classification"
    else:
        there = run_token_classification(model, data, tmp_path / "ray", data_opts=opts, token_opts=tokens,
                                         after=AFTER, engine=Engine(engine="ray", concurrency=2, blocks_per_actor=2))
    assert there.state("infer")["params"]["engine"] == "ray" and there.state("infer")["read_by"] == "workers"
    assert there.manifest["data"] == here.manifest["data"] and there.manifest["tokens"] == here.manifest["tokens"]
    a, b = readers.read_predictions(here), readers.read_predictions(there)
    assert len(a) == 40 and a["example_id"].tolist() == b["example_id"].tolist()
    assert a["pred_tags"].map(list).tolist() == b["pred_tags"].map(list).tolist()
    assert a["correct"].tolist() == b["correct"].tolist() and (~a["correct"]).any()
    np.testing.assert_allclose(a["loss"], b["loss"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(a["confidence"], b["confidence"], rtol=1e-4, atol=1e-5)
    sa, sb = readers.read_spans(here), readers.read_spans(there)
    pd.testing.assert_frame_equal(sa.drop(columns=["loss", "confidence"]), sb.drop(columns=["loss", "confidence"]))
    assert (there.path / HIDDEN).is_dir()  # the workers' shards
    np.testing.assert_allclose(here.hidden_states(), there.hidden_states(), rtol=1e-4, atol=1e-5)
    assert Run.open(here.path).metrics()["overall"] == Run.open(there.path).metrics()["overall"]


@pytest.mark.slow
@pytest.mark.parametrize("bad", ["tags", "id"])
def test_a_bad_cell_in_a_later_block_is_the_in_process_error(local_ray, tmp_path, monkeypatch, bad):
    from erroranalysis.sources import blocks

    monkeypatch.setattr(blocks, "HEAD_ROWS", 4)  # the driver checks rows 1-4; the bad row is a worker's
    model = build_tiny_token_classifier(tmp_path / "model")
    rng = random.Random(0)
    rows = [sentence(rng, i) for i in range(24)]
    if bad == "tags":
        rows[20]["tags"] = rows[20]["tags"][:-1]  # line 21, in the fourth block of six rows
    else:
        rows[19]["id"] = rows[7]["id"]  # the same id in the second and fourth blocks
    data = write_sentences(tmp_path / "eval.jsonl", rows=rows)
    opts, tokens = DataOptions(id_column="id"), TokenParams(device="cpu", batch_size=8)
    messages = []
    for name, engine in (("local", Engine()), ("ray", Engine(engine="ray", concurrency=2, blocks_per_actor=2))):
        with pytest.raises(DataError) as caught:
            run_token_classification(model, data, tmp_path / name, data_opts=opts, token_opts=tokens, after=AFTER,
                                     engine=engine)
        messages.append(str(caught.value))
    needle = "line 21, column 'tags'" if bad == "tags" else "line 20, column 'id'"
    assert messages[0] == messages[1] and needle in messages[0], messages
