"""The masks sft-check reports are TRL's: the same rows prepared by TRL's own SFTTrainer (its `_prepare_dataset`:
tokenizing, add_eos, the completion and assistant masks, labels, truncation, dropping rows left with no label) give
the same input_ids and labels, in every format and masking mode. No training: the trainer is only built."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sft_fixtures import CLEAN_CONV_PAIRS, CLEAN_MESSAGES, CLEAN_PAIRS, CLEAN_TEXT, conversation, tokenizer

from erroranalysis import sft

pytest.importorskip("trl")

LONG = [{"messages": conversation(a="The capital of France is Paris. " * 5)},
        {"messages": conversation(q="What is the capital of France? " * 6, a="Paris.")}]
MESSAGES = CLEAN_MESSAGES + LONG + [{"messages": conversation(a="")}]
PAIRS = CLEAN_PAIRS + [{"prompt": "What is the capital of France? " * 6, "completion": "Paris." * 8},
                       {"prompt": "Already ends with EOS: ", "completion": "yes<|im_end|>"}]
CONV_PAIRS = CLEAN_CONV_PAIRS + [{"prompt": conversation()[:2], "completion": [
    {"role": "assistant", "content": "Paris. " * 10}]}]

# (rows, TRL's SFTConfig arguments, our mode)
CASES = [
    (MESSAGES, {}, "trl"),
    (MESSAGES, {"assistant_only_loss": True}, "assistant-only"),
    (MESSAGES, {"completion_only_loss": True}, "completion-only"),
    (PAIRS, {}, "trl"),
    (PAIRS, {"completion_only_loss": False}, "all-tokens"),
    (CONV_PAIRS, {}, "trl"),
    (CONV_PAIRS, {"assistant_only_loss": True}, "assistant-only"),
    (CONV_PAIRS, {"completion_only_loss": False}, "all-tokens"),
    (CLEAN_TEXT + [{"text": "A cat sat on the mat. " * 12}], {}, "trl"),
]


@pytest.fixture(scope="module")
def tok():
    return tokenizer(generation=True)


@pytest.fixture(scope="module")
def model(tok):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512,
                         pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    return LlamaForCausalLM(config)


def trl_prepared(rows, model, tok, tmp_path, **config):
    """TRL's own preparation of `rows`: the trainer's train_dataset, as (input_ids, labels) per kept row."""
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    args = SFTConfig(output_dir=str(tmp_path / "trl"), report_to=[], bf16=False, use_cpu=True,
                     dataset_num_proc=None, **config)
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tok)
    data = trainer.train_dataset
    return list(zip(data["input_ids"], data["labels"]))


def ours(rows, tok, mode, max_length):
    frame = pd.DataFrame(rows).assign(_line=np.arange(1, len(rows) + 1))
    table = sft.rows_of(frame, "train.jsonl")
    params = sft.SftParams(mode=mode, max_length=max_length)
    encoded = sft.render(table, sft.facts(tok), params.effective_mode(table.format))
    kept = []
    for e in encoded:
        ids, trained = e.ids[:max_length], e.trained[:max_length]
        if trained.any():  # TRL drops a row that truncation leaves with no label
            kept.append((ids.tolist(), np.where(trained, ids, -100).tolist()))
    return kept, sft.check(table, sft.facts(tok), params)


@pytest.mark.parametrize("max_length", [1024, 40])
@pytest.mark.parametrize("rows, config, mode", CASES, ids=[f"{c[2]}-{i}" for i, c in enumerate(CASES)])
def test_masks_equal_trls_preparation(rows, config, mode, max_length, tok, model, tmp_path):
    theirs = trl_prepared(rows, model, tok, tmp_path, max_length=max_length, **config)
    mine, result = ours(rows, tok, mode, max_length)
    assert mine == theirs
    # the rows TRL dropped are the rows reported as training nothing
    dropped = result.summary["counts"]["nothing_trained"]
    assert len(rows) - len(theirs) == dropped


def test_without_generation_markers_assistant_turns_equal_trls_marked_template(tok, model, tmp_path):
    """A template without {% generation %} (TRL refuses it for assistant_only_loss unless it knows the family): the
    assistant turns sft-check marks are those TRL trains under the same rendering with the markers."""
    theirs = trl_prepared(MESSAGES, model, tok, tmp_path, max_length=1024, assistant_only_loss=True)
    mine, _ = ours(MESSAGES, tokenizer(generation=False), "assistant-only", 1024)
    assert mine == theirs


def test_trls_prepared_rows_given_back_as_tokenized_rows_find_only_what_is_planted(tok, model, tmp_path):
    theirs = trl_prepared(CLEAN_MESSAGES, model, tok, tmp_path, max_length=1024, assistant_only_loss=True)
    given = [sft.TokenizedRow(np.asarray(i), np.asarray(lab), 0) for i, lab in theirs]
    shifted = list(theirs[1][1][1:]) + [-100]
    given[1] = sft.TokenizedRow(np.asarray(theirs[1][0]), np.asarray(shifted), 0)
    frame = pd.DataFrame(CLEAN_MESSAGES).assign(_line=np.arange(1, len(CLEAN_MESSAGES) + 1))
    result = sft.check(sft.rows_of(frame, "train.jsonl"), sft.facts(tok), sft.SftParams(mode="assistant-only"),
                       tokenized=given)
    assert result.findings[["row", "kind"]].values.tolist() == [[1, "labels_shifted"]]
