"""The static embedder (model2vec distilled from MiniLM, cached), the one embedder choice and its fallback rule."""

import json
import socket

import numpy as np
import pandas as pd
import pytest
from fake_runs import inferred_run
from typer.testing import CliRunner

from erroranalysis.cli.app import app
from erroranalysis.core.errors import DataError, ModelError, ParameterError
from erroranalysis.embed import choice as embedder_choice
from erroranalysis.embed import static as static_embedding
from erroranalysis.rundir import readers
from erroranalysis.stages.cluster import ClusterParams
from erroranalysis.stages.data_checks import CheckParams, checks_run

pytest.importorskip("model2vec")


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("ERRORANALYSIS_CACHE_DIR", str(tmp_path / "cache"))
    static_embedding.load_static.cache_clear()


@pytest.fixture(scope="module")
def tiny_source(tmp_path_factory):
    """The packaged MiniLM's config and tokenizer with one small layer of random weights (a real config, fast)."""
    from transformers import AutoConfig, AutoTokenizer, BertModel

    from erroranalysis.embed.models import minilm_path

    folder = tmp_path_factory.mktemp("tiny-minilm")
    config = AutoConfig.from_pretrained(minilm_path(), local_files_only=True)
    config.update({"num_hidden_layers": 1, "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 2})
    BertModel(config).save_pretrained(folder, safe_serialization=True)
    AutoTokenizer.from_pretrained(minilm_path(), local_files_only=True).save_pretrained(folder)
    return folder


@pytest.fixture
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise OSError("network is off in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_builds_offline_once_then_loads_from_the_cache(tiny_source, tmp_path, no_network, monkeypatch):
    logged = []
    folder = static_embedding.build_static_model(tiny_source, pca_dims=8, log=logged.append)
    assert folder.parent == tmp_path / "cache" / "static"
    source = json.loads((folder / "source.json").read_text())
    assert source["pca_dims"] == 8 and len(source["source_sha256"]) == 64
    assert static_embedding.is_model2vec_folder(folder) and len(logged) == 1
    assert not [p for p in folder.parent.iterdir() if p.name.endswith(".tmp")]  # no temporary folder left

    import model2vec.distill

    monkeypatch.setattr(model2vec.distill, "distill", lambda **kw: pytest.fail("distilled a second time"))
    assert static_embedding.build_static_model(tiny_source, pca_dims=8, log=logged.append) == folder
    assert len(logged) == 1
    # other settings are another model
    assert static_embedding.model_folder(tiny_source, 16)[0] != folder

    emb = static_embedding.StaticEmbedder(model_path=folder)
    vectors = emb.embed_texts(["the match ended", "the match ended", "", "stock prices fell"])
    assert vectors.shape == (4, 8) and vectors.dtype == np.float32
    assert np.allclose(vectors[0], vectors[1])
    assert np.allclose(np.linalg.norm(vectors[[0, 3]], axis=1), 1, atol=1e-5)
    assert emb.key.startswith("static:") and emb.describe()["name"] == "static"


def test_a_model2vec_folder_is_an_embedder_choice(tiny_source):
    folder = static_embedding.build_static_model(tiny_source, pca_dims=8)
    emb = embedder_choice.text_embedder(str(folder))
    assert isinstance(emb, static_embedding.StaticEmbedder)
    assert emb.embed_texts(["a b c"]).shape == (1, 8)


def test_a_sentence_transformers_folder_with_cls_pooling_is_refused(tmp_path, tiny_source):
    import shutil

    folder = tmp_path / "st"
    shutil.copytree(tiny_source, folder)
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_cls_token": True,
                                                                  "pooling_mode_mean_tokens": False}))
    with pytest.raises(ModelError, match="pooling is 'cls_token'; only mean pooling"):
        embedder_choice.text_embedder(str(folder))
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_mean_tokens": True}))
    assert embedder_choice.text_embedder(str(folder)).embed_texts(["x y"]).shape == (1, 32)
    with pytest.raises(ModelError, match="no such model folder"):
        embedder_choice.text_embedder(str(tmp_path / "missing"))


# -- the one choice and its rule ----------------------------------------------------------------------------


def test_plan_by_name_size_and_hidden_states():
    plan = embedder_choice.plan
    assert plan("auto", has_hidden=True, n_rows=10**6, uses=("duplicates", "label_issues")).source == "hidden"
    small = plan("auto", has_hidden=False, n_rows=embedder_choice.MINILM_MAX_ROWS)
    assert small.source == "minilm" and "cheap" in small.note
    large = plan("auto", has_hidden=False, n_rows=embedder_choice.MINILM_MAX_ROWS + 1)
    assert large.source == "static" and large.off == tuple(sorted(embedder_choice.STATIC_WEAK & set(large.off)))
    assert not large.uses("label_issues") and large.uses("duplicates")
    assert "--check-embedder minilm forces MiniLM" in large.note
    # clustering has no signal without vectors: above the limit it takes the static model, and says so
    clustering = plan("auto", has_hidden=True, n_rows=10**5, uses=("clustering",), label="--embedder")
    assert clustering.source == "static" and clustering.uses("clustering")
    assert "clustering with the static model" in clustering.note and "--embedder minilm" in clustering.note
    assert plan("auto", has_hidden=False, n_rows=100, uses=("clustering",)).source == "minilm"
    assert plan("minilm", has_hidden=False, n_rows=10**6) == embedder_choice.Plan("minilm")
    assert plan("none", has_hidden=True, n_rows=5).uses("duplicates") is False
    assert plan("./my-model", has_hidden=False, n_rows=5).source == "./my-model"
    with pytest.raises(DataError, match="--check-embedder hidden: this run has no hidden states"):
        plan("hidden", has_hidden=False, n_rows=5)
    with pytest.raises(ParameterError, match="embedder='bert'"):
        plan("bert", has_hidden=False, n_rows=5)


def test_params_take_the_same_names():
    assert CheckParams(embedder="static").embedder == "static"
    assert ClusterParams(embedder="static").embedder == "static"
    assert ClusterParams().embedder == "auto" and CheckParams().embedder == "auto"
    assert ClusterParams(embedder="vectors.npy").embedder == "vectors.npy"
    for bad in ("bert", "", "static "):
        with pytest.raises(ParameterError):
            CheckParams(embedder=bad)
        with pytest.raises(ParameterError):
            ClusterParams(embedder=bad)
    with pytest.raises(ParameterError):
        CheckParams(embedder="vectors.npy")  # the checks embed texts: no file of vectors


def small_run(path, n=60):
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, n)
    df = pd.DataFrame({"example_id": [f"e{i}" for i in range(n)],
                       "text": [f"{['sport', 'money'][y]} news item {i}" for i, y in enumerate(labels)],
                       "label": np.array(["a", "b"])[labels], "pred": np.array(["a", "b"])[labels]})
    df.loc[:5, "pred"] = np.where(df.loc[:5, "label"] == "a", "b", "a")
    probs = np.full((n, 2), 0.1, np.float32)
    probs[np.arange(n), (df["pred"] == "b").to_numpy().astype(int)] = 0.9
    return inferred_run(path, df, labels=["a", "b"], probs=probs)


@pytest.mark.parametrize("flag", ["--embedder", "--check-embedder"])
def test_a_bad_embedder_name_is_one_line_exit_2(tmp_path, flag):
    run = small_run(tmp_path / "run")
    command = ["cluster", str(run.path), flag, "bert"] if flag == "--embedder" else \
        ["run", "--model", str(tmp_path), "--data", str(tmp_path / "x.jsonl"), "--out", str(tmp_path / "o"), flag, "bert"]
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "bert" in lines[0] and "static" in lines[0] and "Traceback" not in result.output


def test_above_the_minilm_limit_label_issues_go_without_vectors_and_say_so(tmp_path, tiny_source, monkeypatch):
    folder = static_embedding.build_static_model(tiny_source, pca_dims=8)
    monkeypatch.setattr(static_embedding, "build_static_model", lambda **kw: folder)
    monkeypatch.setattr(embedder_choice, "MINILM_MAX_ROWS", 10)
    run = small_run(tmp_path / "run")
    notes = []
    from erroranalysis.core.progress import as_reporter

    reporter = as_reporter(None)
    monkeypatch.setattr(type(reporter), "note", lambda self, message: notes.append(message))
    checks_run(run.path, CheckParams(), progress=reporter)
    record = readers.read_checks_report(run)["params"]
    assert record["embedder"] == "static"
    assert record["vectors"]["without_vectors"] == ["label_issues", "shift"]
    assert "60 rows: above 10" in record["vectors"]["note"]
    assert readers.read_checks_report(run)["label_issues"]["neighbors"] is None
    assert any("label issues from the model's confidence alone" in n for n in notes)
    manifest = json.loads((run.path / "manifest.json").read_text())
    assert manifest["stages"]["checks"]["params"]["vectors"]["without_vectors"] == ["label_issues", "shift"]
    # forced: MiniLM at any size (here the tiny static folder stands for a model folder the user names)
    checks_run(run.path, CheckParams(embedder=str(folder)))
    report = readers.read_checks_report(run)
    assert report["params"]["vectors"]["without_vectors"] == [] and report["label_issues"]["neighbors"]


@pytest.mark.slow
def test_the_packaged_static_model_is_distilled_from_minilm(monkeypatch, no_network):
    """The real build (about 1.5 minutes once; the user's cache, so later runs load it)."""
    monkeypatch.delenv("ERRORANALYSIS_CACHE_DIR")
    emb = static_embedding.StaticEmbedder()
    vectors = emb.embed_texts(["The striker scored twice in the final.", "Two goals from the striker in the final.",
                               "Shares fell after the bank's profit warning."])
    assert vectors.shape == (3, static_embedding.PCA_DIMS)
    sims = vectors @ vectors.T
    assert sims[0, 1] > sims[0, 2] + 0.1


def test_build_with_distills_through_the_runner_once_then_finds_the_cache(tiny_source, monkeypatch):
    """Under Ray the checks stage distills the static model on a worker (`build_with(call_on_worker ...)`): the
    runner is called once, while the model is not built, and the embedder is then the one a plain use builds."""
    import erroranalysis.embed.models as models

    monkeypatch.setattr(models, "minilm_path", lambda: tiny_source)
    calls = []

    def runner(fn, **kwargs):
        calls.append(kwargs)
        return fn(**kwargs)

    built = static_embedding.StaticEmbedder(pca_dims=8)
    built.build_with(runner)
    assert calls == [{"pca_dims": 8}] and (built.folder / "source.json").is_file()
    again = static_embedding.StaticEmbedder(pca_dims=8)
    again.build_with(runner)
    assert len(calls) == 1  # found in the cache: no second build
    plain = static_embedding.StaticEmbedder(pca_dims=8)
    assert (built.key, built.describe()) == (again.key, again.describe()) == (plain.key, plain.describe())
    np.testing.assert_array_equal(built.embed_texts(["a b c"]), plain.embed_texts(["a b c"]))
