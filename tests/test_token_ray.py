"""`run --task token-classification --engine ray`: the token classifier's batch function on Ray Data actors (a real
local Ray, `ray.init(num_cpus=2)`) gives the in-process run's sentences, spans, metrics and span vectors."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from token_fixtures import build_tiny_token_classifier, write_sentences
from typer.testing import CliRunner

from erroranalysis.cli.app import app
from erroranalysis.engines import Engine
from erroranalysis.rundir import HIDDEN, Run, readers
from erroranalysis.sources.table import DataOptions
from erroranalysis.stages import AfterParams, TokenParams, run_token_classification

AFTER = AfterParams(checks=None, slices=None, cluster=None)


@pytest.mark.slow
def test_ray_gives_the_in_process_token_run(local_ray, tmp_path):
    model = build_tiny_token_classifier(tmp_path / "model")
    data = write_sentences(tmp_path / "eval.jsonl", n=40)
    opts, tokens = DataOptions(id_column="id"), TokenParams(device="cpu", batch_size=8)
    here = run_token_classification(model, data, tmp_path / "local", data_opts=opts, token_opts=tokens, after=AFTER)
    # 2 actors, 2 blocks each: 10 sentences a block, batched by length within each block
    there = run_token_classification(model, data, tmp_path / "ray", data_opts=opts, token_opts=tokens, after=AFTER,
                                     engine=Engine(engine="ray", concurrency=2, blocks_per_actor=2))
    assert there.state("infer")["params"]["engine"] == "ray"
    a, b = readers.read_predictions(here), readers.read_predictions(there)
    assert len(a) == 40 and a["example_id"].tolist() == b["example_id"].tolist()
    assert a["pred_tags"].map(list).tolist() == b["pred_tags"].map(list).tolist()
    assert a["correct"].tolist() == b["correct"].tolist() and (~a["correct"]).any()
    np.testing.assert_allclose(a["loss"], b["loss"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(a["confidence"], b["confidence"], rtol=1e-4, atol=1e-5)
    sa, sb = readers.read_spans(here), readers.read_spans(there)
    pd.testing.assert_frame_equal(sa.drop(columns=["loss", "confidence"]), sb.drop(columns=["loss", "confidence"]))
    np.testing.assert_allclose(np.load(here.path / HIDDEN), np.load(there.path / HIDDEN), rtol=1e-4, atol=1e-5)
    assert Run.open(here.path).metrics()["overall"] == Run.open(there.path).metrics()["overall"]


@pytest.mark.slow
def test_cli_run_takes_engine_ray_for_a_token_classifier(local_ray, tmp_path):
    model = build_tiny_token_classifier(tmp_path / "model")
    data = write_sentences(tmp_path / "eval.jsonl", n=12)
    out = CliRunner().invoke(app, ["run", "--model", str(model), "--data", str(data), "--id-column", "id",
                                   "--out", str(tmp_path / "run"), "--engine", "ray", "--device", "cpu",
                                   "--no-slices", "--no-cluster", "--json"])
    assert out.exit_code == 0, out.output
    run = Run.open(tmp_path / "run")
    assert run.task == "token-classification" and run.state("infer")["params"]["engine"] == "ray"
