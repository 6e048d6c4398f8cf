"""Encoder-decoder generation (T5, BART): loading, greedy decoding against transformers' own generate, the reference
loss against the model's own forward pass with labels, and a full `run --task generation`.

Tiny random T5 and BART models (2 layers, 32 wide) from their real config classes, each with a BPE tokenizer trained
in the fixture on a small corpus and the special tokens of its family (T5: `<pad>` `</s>` `<unk>`, `$A </s>`; BART:
`<s>` `<pad>` `</s>` `<unk>`, `<s> $A </s>`): nothing is downloaded."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

CORPUS = ["Translate to French: the cat sat on the mat.", "Summarize: markets fell as rates rose.",
          "le chat est sur le tapis", '{"label": "sport"} {"label": "tech"} {"label": "business"}',
          "The quick brown fox jumps over the lazy dog.", "business sport tech politics"] * 20
PROMPTS = ["Translate to French: the cat sat.", "Summarize: markets fell as the central bank raised rates today.",
           "tech", "The quick brown fox jumps over the lazy dog and the cat.", "sport?"]
REFERENCES = ["le chat", '{"label": "business"}', "", "the lazy dog " * 4, None]


def _tokenizer(specials: list[str], template: str, **tokens):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    tok.post_processor = processors.TemplateProcessing(
        single=template, special_tokens=[(t, tok.token_to_id(t)) for t in specials if t in template])
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", **tokens)


def build_tiny_t5(folder: Path, seed: int = 0) -> Path:
    import torch
    from transformers import T5Config, T5ForConditionalGeneration

    torch.manual_seed(seed)
    tokenizer = _tokenizer(["<pad>", "</s>", "<unk>"], "$A </s>", pad_token="<pad>", eos_token="</s>")
    # the Flan-T5 (T5 v1.1) layout: gated-GELU feed-forward, T5Config ties the embeddings anyway
    config = T5Config(vocab_size=len(tokenizer), d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2,
                      feed_forward_proj="gated-gelu", tie_word_embeddings=False,
                      pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                      decoder_start_token_id=tokenizer.pad_token_id)
    model = T5ForConditionalGeneration(config).eval()
    with torch.no_grad():  # the embeddings are tied: louder blocks, or a random decoder only repeats its input
        for block in model.decoder.block:
            block.layer[-1].DenseReluDense.wo.weight.mul_(30)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return folder


def build_tiny_bart(folder: Path, seed: int = 0) -> Path:
    import torch
    from transformers import BartConfig, BartForConditionalGeneration

    torch.manual_seed(seed)
    tokenizer = _tokenizer(["<s>", "<pad>", "</s>", "<unk>"], "<s> $A </s>", bos_token="<s>", pad_token="<pad>",
                           eos_token="</s>")
    config = BartConfig(vocab_size=len(tokenizer), d_model=32, encoder_layers=2, decoder_layers=2,
                        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
                        decoder_ffn_dim=64, max_position_embeddings=128, pad_token_id=tokenizer.pad_token_id,
                        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                        decoder_start_token_id=tokenizer.eos_token_id, forced_bos_token_id=tokenizer.bos_token_id,
                        forced_eos_token_id=None, init_std=0.5)
    model = BartForConditionalGeneration(config).eval()
    model.generation_config.forced_bos_token_id = tokenizer.bos_token_id
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def t5_dir(tmp_path_factory) -> Path:
    return build_tiny_t5(tmp_path_factory.mktemp("seq2seq") / "t5")


@pytest.fixture(scope="module")
def bart_dir(tmp_path_factory) -> Path:
    return build_tiny_bart(tmp_path_factory.mktemp("seq2seq") / "bart")


@pytest.fixture(scope="module", params=["t5", "bart"])
def lm(request, t5_dir, bart_dir):
    from erroranalysis.infer.causal_lm import load_causal_lm

    return load_causal_lm(t5_dir if request.param == "t5" else bart_dir, device="cpu")


def _encode(lm, prompts=PROMPTS):
    from erroranalysis.infer.generation import GenerationParams, encode_prompts, prompt_budget, render_prompt

    texts, flags = zip(*[render_prompt(lm, p) for p in prompts])
    ids, _, _ = encode_prompts(lm, list(texts), list(flags), prompt_budget(lm, GenerationParams()))
    return ids


def _independent_loss(lm, prompt: list[int], answer: list[int]) -> float:
    """The mean NLL of `answer` from the model's own forward pass with `labels` (transformers shifts them right
    behind decoder_start_token_id); a forced BOS is part of the labels and not scored."""
    import torch

    forced = list(lm.decoder_prefix[1:])
    labels = torch.tensor([forced + answer])
    with torch.no_grad():
        out = lm.model(input_ids=torch.tensor([prompt]), labels=labels)
    logp = torch.log_softmax(out.logits[0].float(), dim=-1)
    picked = logp[torch.arange(labels.shape[1]), labels[0]][len(forced):]
    if not forced:  # without a forced BOS the model's own loss is the same number
        assert abs(float(out.loss) + float(picked.mean())) < 1e-5 * max(1.0, float(out.loss))
    return -float(picked.mean())


def test_loads_as_encoder_decoder(lm):
    assert lm.encoder_decoder and lm.describe()["encoder_decoder"]
    assert lm.describe()["architecture"] in ("T5ForConditionalGeneration", "BartForConditionalGeneration")
    start = lm.model.config.decoder_start_token_id
    assert lm.decoder_prefix[0] == start
    if "Bart" in lm.describe()["architecture"]:
        assert lm.decoder_prefix == (start, lm.tokenizer.bos_token_id)


def test_greedy_matches_transformers_generate(lm):
    import torch

    from erroranalysis.infer.generation import GenerationParams, generate

    ids = _encode(lm)
    ours = generate(lm, ids, GenerationParams(max_new_tokens=8, batch_size=3))
    for seq, got in zip(ids, ours["output_ids"]):
        x = torch.tensor([seq])
        out = lm.model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=8 + len(lm.decoder_prefix) - 1,
                                do_sample=False, num_beams=1, eos_token_id=list(lm.eos_ids), pad_token_id=lm.pad_id)
        new = out[0, len(lm.decoder_prefix):].tolist()
        if new and new[-1] in lm.eos_ids:
            new = new[:new.index(new[-1])]
        assert got == new[:len(got)] and len(got) == min(len(new), 8)
    assert any(ours["output_ids"]), "the tiny model should produce some tokens"


def test_reference_loss_equals_the_models_own_forward(lm):
    from erroranalysis.infer.generation import GenerationParams, answer_losses, encode_answers, generate

    ids = _encode(lm)
    refs = encode_answers(lm, REFERENCES)
    result = generate(lm, ids, GenerationParams(max_new_tokens=6, batch_size=2), reference_ids=refs)
    expected = [np.nan if not r else _independent_loss(lm, p, r) for p, r in zip(ids, refs)]
    np.testing.assert_allclose(result["reference_loss"], expected, rtol=1e-4, atol=1e-4, equal_nan=True)
    assert np.isnan(result["reference_loss"][[2, 4]]).all() and np.isfinite(result["reference_loss"][[0, 1, 3]]).all()
    forced = answer_losses(lm, ids, refs, batch_size=3)
    np.testing.assert_allclose(forced, expected, rtol=1e-4, atol=1e-4, equal_nan=True)
    out_loss = answer_losses(lm, ids, result["output_ids"])  # the output loss is the output's own teacher forcing
    np.testing.assert_allclose(result["output_loss"], out_loss, rtol=1e-4, atol=1e-4, equal_nan=True)


def test_batch_size_and_sampling_seed(lm):
    from erroranalysis.infer.generation import GenerationParams, generate

    ids = _encode(lm)
    one = generate(lm, ids, GenerationParams(max_new_tokens=6, batch_size=1))
    five = generate(lm, ids, GenerationParams(max_new_tokens=6, batch_size=5))
    assert one["output_ids"] == five["output_ids"]
    opts = dict(max_new_tokens=6, do_sample=True, temperature=2.0, batch_size=2)
    a, b = (generate(lm, ids, GenerationParams(seed=1, **opts)) for _ in range(2))
    assert a["output_ids"] == b["output_ids"]


def test_stop_string_cuts_the_output(lm):
    from erroranalysis.infer.generation import GenerationParams, generate

    ids = _encode(lm)
    free = generate(lm, ids, GenerationParams(max_new_tokens=12))
    row = max(range(len(ids)), key=lambda i: len(free["output"][i]))
    text = free["output"][row]
    assert len(text) >= 4
    stop = text[2:4]
    stopped = generate(lm, [ids[row]], GenerationParams(max_new_tokens=12, stop=(stop,)))
    assert stopped["output"][0] == text[:text.find(stop)] and stopped["stop_reason"][0] == "stop"


def test_run_generation_with_t5(t5_dir, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from erroranalysis.cli.app import app
    from erroranalysis.rundir import Run

    monkeypatch.setenv("ERRORANALYSIS_CACHE_DIR", str(tmp_path / "cache"))
    rows = [{"id": f"r{i}", "prompt": PROMPTS[i % len(PROMPTS)], "reference": ["le chat", "sport", "tech"][i % 3]}
            for i in range(12)]
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["run", "--model", str(t5_dir), "--data", str(data), "--out", str(out),
                                      "--task", "generation", "--id-column", "id", "--max-new-tokens", "5",
                                      "--no-checks", "--no-slices", "--no-cluster", "--json"])
    assert result.exit_code == 0, result.output
    run = Run.open(out)
    assert run.task == "generation" and run.manifest["model"]["architecture"] == "T5ForConditionalGeneration"
    assert run.manifest["model"]["encoder_decoder"] is True
    preds = run.predictions()
    for column in ("prompt", "output", "reference", "reference_loss", "output_loss", "n_output_tokens",
                   "stop_reason", "failure_reason", "low_loss_failure"):
        assert column in preds.columns
    from erroranalysis.infer.causal_lm import load_causal_lm
    from erroranalysis.infer.generation import encode_answers

    lm = load_causal_lm(t5_dir, device="cpu")
    ids = _encode(lm, preds["prompt"].tolist())
    refs = encode_answers(lm, preds["reference"].tolist())
    expected = [_independent_loss(lm, p, r) for p, r in zip(ids, refs)]
    np.testing.assert_allclose(preds["reference_loss"].to_numpy(), expected, rtol=1e-4, atol=1e-4)
    assert (preds["n_output_tokens"] <= 5).all()
    assert json.loads(result.stdout)["overall"]["n"] == 12


def test_detection_takes_encoder_decoders_as_generation(t5_dir, bart_dir):
    from erroranalysis import tasks
    from erroranalysis.core.errors import ModelError
    from erroranalysis.infer.classifier import read_config

    for folder in (t5_dir, bart_dir):
        config = read_config(folder)
        assert tasks.detect(config) == "generation" and tasks.detect(config, "generation") == "generation"
        with pytest.raises(ModelError, match="--task classification was given"):
            tasks.detect(config, "classification")


@pytest.mark.slow
def test_the_trainer_callback_and_timeline_take_a_t5_in_training(t5_dir, tmp_path):
    """A T5 being fine-tuned: the callback's auto task is generation (the model can generate), the step runs are
    seq2seq generation runs, and the timeline reads them."""
    import transformers
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, Trainer, TrainingArguments

    from erroranalysis import stages
    from erroranalysis.infer.generation import GenerationParams
    from erroranalysis.integrations import attach
    from erroranalysis.rundir import Run
    from erroranalysis.sources.table import DataOptions

    transformers.logging.set_verbosity_error()
    tokenizer = AutoTokenizer.from_pretrained(t5_dir)
    model = AutoModelForSeq2SeqLM.from_pretrained(t5_dir)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"p{i}", "prompt": PROMPTS[i % 5], "reference": "le chat"}) + "\n"
                               for i in range(6)))
    enc = tokenizer([PROMPTS[i % 5] for i in range(12)])
    labels = tokenizer(["le chat"] * 12)["input_ids"]
    train = [{"input_ids": x, "attention_mask": m, "labels": y}
             for x, m, y in zip(enc["input_ids"], enc["attention_mask"], labels)]
    args = TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=4, per_device_train_batch_size=4,
                             eval_strategy="no", save_strategy="no", logging_steps=1, report_to=[], use_cpu=True,
                             disable_tqdm=True, seed=0)
    trainer = Trainer(model=model, args=args, train_dataset=train, processing_class=tokenizer,
                      data_collator=transformers.DataCollatorForSeq2Seq(tokenizer, model=model))
    callback = attach(trainer, prompts, out=tmp_path / "runs" / "t5", data=DataOptions(id_column="id"), every=2,
                      generation=GenerationParams(max_new_tokens=4),
                      after=stages.AfterParams(checks=None, slices=None, cluster=None))
    trainer.train()
    assert callback.task == "generation" and [p.name for p in callback.runs] == ["step-000002", "step-000004"]
    run = Run.open(tmp_path / "runs" / "t5" / "step-000004")
    assert run.manifest["model"]["encoder_decoder"] is True and run.manifest["training"]["step"] == 4
    assert np.isfinite(run.predictions()["reference_loss"]).all()
    doc = stages.build_timeline(tmp_path / "runs" / "t5")
    assert doc["task"] == "generation" and len(doc["steps"]) == 2
