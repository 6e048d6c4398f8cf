"""Batched inference against a plain per-example forward pass, and checkpoints that must be refused."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from conftest import eval_rows, write_jsonl

from erroranalysis.core.errors import ModelError, ParameterError
from erroranalysis.infer.classifier import infer, load_classifier


def plain_forward(clf, text: str, max_length: int):
    """The independent computation: one example, no padding, no sorting."""
    import torch

    enc = clf.tokenizer(text, truncation=True, max_length=max_length, return_tensors="pt")
    with torch.no_grad():
        out = clf.model(**enc, output_hidden_states=True)
    probs = torch.softmax(out.logits[0], -1).numpy()
    return probs, out.hidden_states[-1][0].mean(0).numpy(), enc["input_ids"].shape[1]


def test_batched_results_equal_a_plain_forward_pass(tiny_checkpoint):
    clf = load_classifier(tiny_checkpoint, device="cpu")
    rows = eval_rows(23)
    texts = [r["text"] for r in rows]
    gold = np.array([clf.labels.index(r["label"]) for r in rows])
    chunks = list(infer(clf, texts, gold, batch_size=4, max_length=32, chunk_size=10))
    assert [len(c["probs"]) for c in chunks] == [10, 10, 3]
    got = {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]}
    for i, text in enumerate(texts):
        probs, hidden, n_tokens = plain_forward(clf, text, 32)
        np.testing.assert_allclose(got["probs"][i], probs, atol=1e-5)
        np.testing.assert_allclose(got["hidden"][i], hidden, atol=1e-4)
        assert got["n_tokens"][i] == n_tokens
        assert got["loss"][i] == pytest.approx(-np.log(probs[gold[i]]), abs=1e-4)
    long_texts = np.array(["very long" in t for t in texts])
    np.testing.assert_array_equal(got["truncated"], long_texts)
    assert got["n_tokens"].max() == 32


def test_token_budget_batches_give_the_plain_forward_pass(tiny_checkpoint):
    """The CPU default (batches of up to max_tokens padded tokens) changes how rows are grouped, not what they get."""
    clf = load_classifier(tiny_checkpoint, device="cpu")
    texts = [r["text"] for r in eval_rows(23)]
    got = next(infer(clf, texts, None, max_length=32, max_tokens=40))  # 1 to 5 rows a batch here
    for i, text in enumerate(texts):
        probs, hidden, _ = plain_forward(clf, text, 32)
        np.testing.assert_allclose(got["probs"][i], probs, atol=1e-5)
        np.testing.assert_allclose(got["hidden"][i], hidden, atol=1e-4)


def test_batches_cover_every_row_once_within_the_budget():
    from erroranalysis.infer.classifier import batches

    lengths = np.random.default_rng(0).integers(1, 300, size=1000).astype(np.int32)
    for rows, tokens in ((128, 4096), (32, 0), (7, 100), (128, 50)):
        got = list(batches(lengths, rows, tokens))
        assert sorted(np.concatenate(got).tolist()) == list(range(1000))
        order = np.concatenate(got)
        assert (np.diff(lengths[order]) <= 0).all()  # longest first
        for b in got:
            assert len(b) <= rows
            assert not tokens or len(b) == 1 or len(b) * lengths[b].max() <= tokens


@pytest.mark.parametrize("device, precision, batch_size, max_tokens, expected", [
    ("cpu", "fp32", None, None, (128, 2048)), ("cpu", "bf16", None, None, (128, 4096)),
    ("cpu", "auto", None, None, (128, 2048)), ("cuda", "auto", None, None, (32, 0)),
    ("cuda:1", "fp32", None, None, (32, 0)), ("cpu", "fp32", 16, None, (16, 0)),
    ("cpu", "bf16", None, 1024, (128, 1024)), ("cpu", "fp32", 8, 1000, (8, 1000)), ("cpu", "fp32", None, 0, (128, 0))])
def test_batching_defaults_per_device_and_precision(device, precision, batch_size, max_tokens, expected):
    from erroranalysis.infer.classifier import batching

    assert batching(device, batch_size, max_tokens, precision) == expected


def test_bf16_autocast_stays_close(tiny_checkpoint):
    clf = load_classifier(tiny_checkpoint, device="cpu")
    texts = [r["text"] for r in eval_rows(12)]
    fp32 = next(infer(clf, texts, None, max_length=32))
    bf16 = next(infer(clf, texts, None, max_length=32, precision="bf16"))
    np.testing.assert_allclose(bf16["probs"], fp32["probs"], atol=0.03)
    assert np.isnan(fp32["loss"]).all()


@pytest.mark.parametrize("param, value", [("batch_size", 0), ("max_tokens", -1), ("max_length", 1),
                                          ("precision", "fp8")])
def test_parameters_out_of_range(tiny_checkpoint, param, value):
    clf = load_classifier(tiny_checkpoint, device="cpu")
    with pytest.raises(ParameterError, match=f"{param}="):
        next(infer(clf, ["a"], None, **{param: value}))


def copy_checkpoint(src, dst):
    shutil.copytree(src, dst)
    return dst


def test_missing_path(tmp_path):
    with pytest.raises(ModelError, match="no such checkpoint folder"):
        load_classifier(tmp_path / "nope")


def test_file_instead_of_folder(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"x")
    with pytest.raises(ModelError, match="is a file; --model takes the checkpoint folder"):
        load_classifier(tmp_path / "model.safetensors")


def test_no_weights(tiny_checkpoint, tmp_path):
    folder = copy_checkpoint(tiny_checkpoint, tmp_path / "ck")
    (folder / "model.safetensors").unlink()
    with pytest.raises(ModelError, match=r"no model weights \(model.safetensors\)"):
        load_classifier(folder)


def test_pickled_weights_refused(tiny_checkpoint, tmp_path):
    folder = copy_checkpoint(tiny_checkpoint, tmp_path / "ck")
    (folder / "model.safetensors").rename(folder / "pytorch_model.bin")
    with pytest.raises(ModelError, match="only pickled weights"):
        load_classifier(folder)


def test_truncated_weights(tiny_checkpoint, tmp_path):
    folder = copy_checkpoint(tiny_checkpoint, tmp_path / "ck")
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelError, match="model.safetensors: truncated or damaged weights file"):
        load_classifier(folder)
    weights.write_bytes(data[:8] + b"\xff" * 64 + data[72:])  # the header's JSON overwritten, the length kept
    with pytest.raises(ModelError, match="model.safetensors: truncated or damaged weights file"):
        load_classifier(folder)
    weights.write_bytes(data[:5])
    with pytest.raises(ModelError, match="model.safetensors: truncated or damaged weights file"):
        load_classifier(folder)


def test_remote_code_is_refused_and_never_runs(tiny_checkpoint, tmp_path):
    folder = copy_checkpoint(tiny_checkpoint, tmp_path / "ck")
    marker = tmp_path / "code-ran"
    (folder / "modeling_evil.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {"AutoModelForSequenceClassification": "modeling_evil.EvilModel"}
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelError, match="asks to run code shipped with the checkpoint.*--trust-remote-code"):
        load_classifier(folder)
    assert not marker.exists()


def test_device_auto_is_cpu_here(tiny_checkpoint):
    import torch

    clf = load_classifier(tiny_checkpoint)
    assert clf.device == ("cuda" if torch.cuda.is_available() else "cpu")
    assert clf.labels == ["negative", "neutral", "positive"]


def test_forward_pass_asks_for_no_hidden_states_yet_returns_the_last(tiny_checkpoint):
    """Only the last layer is pooled: the model must not be asked for every layer's states."""
    from erroranalysis.infer.classifier import predict_batch, tokenize

    clf = load_classifier(tiny_checkpoint, device="cpu")
    calls = []
    forward = clf.model.forward

    def spy(*args, **kwargs):
        calls.append(kwargs.get("output_hidden_states"))
        return forward(*args, **kwargs)

    clf.model.forward = spy
    texts = [r["text"] for r in eval_rows(5)]
    ids, _ = tokenize(clf.tokenizer, texts, 32)
    out = predict_batch(clf, ids, None)
    assert calls == [False]
    for i, text in enumerate(texts):
        _, hidden, _ = plain_forward(clf, text, 32)
        np.testing.assert_allclose(out["hidden"][i], hidden, atol=1e-4)


@pytest.mark.parametrize("asked, device, ran", [("auto", "cpu", "fp32"), ("auto", "cuda", "bf16"),
                                                 ("auto", "cuda:1", "bf16"), ("fp32", "cuda", "fp32"),
                                                 ("bf16", "cpu", "bf16")])
def test_precision_that_runs(asked, device, ran):
    from erroranalysis.infer.classifier import resolve_precision

    assert resolve_precision(asked, device) == ran


def test_bf16_note_only_on_a_cpu_without_native_bf16(tmp_path):
    from erroranalysis.infer.classifier import cpu_bf16_note

    plain = tmp_path / "plain"
    plain.write_text("processor : 0\nflags : fpu sse avx2 avx512f\n")
    native = tmp_path / "native"
    native.write_text("processor : 0\nflags : fpu avx512f avx512_bf16 amx_bf16\n")
    assert "without native bf16" in cpu_bf16_note("bf16", "cpu", plain)
    assert cpu_bf16_note("bf16", "cpu", native) is None
    assert cpu_bf16_note("fp32", "cpu", plain) is None
    assert cpu_bf16_note("bf16", "cuda", plain) is None
    assert cpu_bf16_note("bf16", "cpu", tmp_path / "absent") is None  # cannot tell: no warning


def test_manifest_records_the_precision_that_ran(tiny_checkpoint, eval_jsonl, tmp_path, monkeypatch):
    from erroranalysis.infer import classifier
    from erroranalysis.sources.table import DataOptions
    from erroranalysis.stages import AfterParams, InferParams, run_checkpoint

    notes = []
    monkeypatch.setattr(classifier, "cpu_bf16_note", lambda precision, device: f"note {precision} {device}")
    import erroranalysis.stages.infer as infer_stage

    monkeypatch.setattr(infer_stage, "cpu_bf16_note", classifier.cpu_bf16_note)
    after = AfterParams(checks=None, slices=None, cluster=None)
    run = run_checkpoint(tiny_checkpoint, eval_jsonl, tmp_path / "auto", data_opts=DataOptions(id_column="id"),
                         infer_opts=InferParams(max_length=32), after=after, log=notes.append)
    model = run.manifest["model"]
    assert (model["precision"], model["precision_asked"]) == ("fp32", "auto")
    assert (model["batch_size"], model["max_tokens"]) == (128, 2048)  # what ran: the CPU default for fp32
    assert run.manifest["stages"]["infer"]["params"]["precision"] == "fp32"
    assert notes == ["note fp32 cpu"]
    run = run_checkpoint(tiny_checkpoint, eval_jsonl, tmp_path / "bf16", data_opts=DataOptions(id_column="id"),
                         infer_opts=InferParams(max_length=32, precision="bf16"), after=after)
    assert run.manifest["model"]["precision"] == "bf16"


def test_bf16_weights_stay_close_to_fp32(tiny_checkpoint):
    """--precision bf16 loads the weights as bfloat16 (no autocast); outputs stay float32 and close."""
    import torch

    texts = [r["text"] for r in eval_rows(12)]
    fp32 = next(infer(load_classifier(tiny_checkpoint, device="cpu"), texts, None, max_length=32))
    clf = load_classifier(tiny_checkpoint, device="cpu", precision="bf16")
    assert clf.precision == "bf16" and next(clf.model.parameters()).dtype == torch.bfloat16
    bf16 = next(infer(clf, texts, None, max_length=32, precision="bf16"))
    assert bf16["probs"].dtype == np.float32 and bf16["hidden"].dtype == np.float32
    np.testing.assert_allclose(bf16["probs"], fp32["probs"], atol=0.03)


def test_train_texts_go_through_the_checkpoint_batched_as_the_run_was(tiny_checkpoint, eval_jsonl, tmp_path,
                                                                      monkeypatch):
    """The checks embed a train file with the run's own checkpoint, with the batching the manifest recorded (a
    batch size alone, without its token budget, would run 128-row batches of any length)."""
    from erroranalysis.infer import classifier
    from erroranalysis.sources.table import DataOptions
    from erroranalysis.stages import AfterParams, InferParams, checks_run, run_checkpoint

    run = run_checkpoint(tiny_checkpoint, eval_jsonl, tmp_path / "run", data_opts=DataOptions(id_column="id"),
                         infer_opts=InferParams(max_length=32), after=AfterParams(checks=None, slices=None,
                                                                                   cluster=None))
    seen = []
    real = classifier.infer
    monkeypatch.setattr(classifier, "infer", lambda *a, **k: seen.append(k) or real(*a, **k))
    train = write_jsonl(tmp_path / "train.jsonl", [{"text": r["text"], "label": r["label"]} for r in eval_rows(20)])
    checks_run(run.path, train=train, embedder="auto")
    assert [(k["batch_size"], k["max_tokens"]) for k in seen] == [(128, 2048)]


def test_model_libraries_import_without_full_collections():
    """In a fresh process: no full garbage collection while torch and transformers import (left alone, Python runs
    several, each over everything imported so far) and the collector on again afterwards; the imports frozen only
    when the process asked (the CLI does), and a second call freezes nothing more."""
    import subprocess
    import sys

    script = """
import gc, json, sys
from erroranalysis import libraries
libraries.FREEZE = sys.argv[1] == "freeze"
full = []
gc.callbacks.append(lambda phase, info: full.append(1) if phase == "stop" and info["generation"] == 2 else None)
libraries.import_model_libraries()
frozen = gc.get_freeze_count()
libraries.import_model_libraries()
print(json.dumps({"full": len(full), "enabled": gc.isenabled(), "frozen": frozen, "again": gc.get_freeze_count(),
                  "imported": all(m in sys.modules for m in ("torch", "transformers.modeling_utils"))}))
"""
    for mode in ("freeze", "library"):
        out = json.loads(subprocess.run([sys.executable, "-c", script, mode], capture_output=True, text=True,
                                        check=True).stdout)
        assert out["imported"] and out["enabled"]
        assert out["full"] == 0
        assert out["again"] == out["frozen"]
        assert (out["frozen"] > 100_000) if mode == "freeze" else out["frozen"] == 0


@pytest.mark.parametrize("bad", [{"device": "gpu"}, {"precision": "fp16"}])
def test_a_bad_device_or_precision_is_refused_before_the_weights_are_read(tiny_checkpoint, monkeypatch, bad):
    from erroranalysis.infer import classifier

    hashed = []
    monkeypatch.setattr(classifier, "weights_sha256", lambda files: hashed.append(files) or "x")
    with pytest.raises(ParameterError):
        load_classifier(tiny_checkpoint, **bad)
    assert hashed == []


def test_the_command_freezes_the_model_libraries_a_library_user_does_not():
    import subprocess
    import sys

    script = """
import sys
from erroranalysis import libraries
before = libraries.FREEZE
from erroranalysis.cli.app import main
sys.argv = ["erroranalysis", "--version"]
try:
    main()
except SystemExit:
    pass
print(before, libraries.FREEZE)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
    assert out[-2:] == ["False", "True"]
