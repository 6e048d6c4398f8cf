"""A tiny byte-level BPE tokenizer with a ChatML template (optionally with {% generation %} markers, as TRL's
assistant_only_loss needs), trained in a second, and SFT rows in each TRL format, clean or with one planted fault."""

from __future__ import annotations

import json
from pathlib import Path

CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
# the same rendering, with the assistant's text and end-of-turn token inside {% generation %} (TRL's training form)
CHATML_GEN = ("{% for message in messages %}{% if message['role'] == 'assistant' %}{{ '<|im_start|>assistant\n' }}"
              "{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}{{ '\n' }}{% else %}"
              "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endif %}"
              "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
CORPUS = ["What is the capital of France? The capital of France is Paris.", "You are a helpful assistant.",
          "Translate to French: good morning. Bonjour.", "List three colours: red, green and blue.",
          "Summarize: the cat sat on the mat. A cat sat.", "user assistant system"] * 20


def tokenizer(generation: bool = False, pad_is_eos: bool = False, bos: bool = False):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<pad>", "<s>", "<|im_start|>", "<|im_end|>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    if bos:  # a tokenizer that adds BOS itself, as Llama's does
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<|im_end|>" if pad_is_eos else "<pad>",
                                   eos_token="<|im_end|>", bos_token="<s>" if bos else None)
    fast.chat_template = CHATML_GEN if generation else CHATML
    return fast


def save_tokenizer(folder: Path, **kwargs) -> Path:
    tokenizer(**kwargs).save_pretrained(folder)
    return folder


def conversation(q: str = "What is the capital of France?", a: str = "The capital of France is Paris.",
                 system: bool = True) -> list[dict]:
    head = [{"role": "system", "content": "You are a helpful assistant."}] if system else []
    return head + [{"role": "user", "content": q}, {"role": "assistant", "content": a}]


CLEAN_MESSAGES = [{"messages": conversation()},
                  {"messages": conversation("Translate to French: good morning.", "Bonjour.")},
                  {"messages": conversation("List three colours.", "red, green and blue", system=False)},
                  {"messages": conversation("Summarize: the cat sat on the mat.", "A cat sat.")
                   + [{"role": "user", "content": "Shorter?"}, {"role": "assistant", "content": "Cat sat."}]}]
CLEAN_PAIRS = [{"prompt": "What is the capital of France? ", "completion": "Paris."},
               {"prompt": "Translate to French: good morning. ", "completion": "Bonjour."},
               {"prompt": "List three colours: ", "completion": "red, green and blue."}]
CLEAN_CONV_PAIRS = [{"prompt": [{"role": "user", "content": "What is the capital of France?"}],
                     "completion": [{"role": "assistant", "content": "Paris."}]},
                    {"prompt": [{"role": "system", "content": "You are a helpful assistant."},
                                {"role": "user", "content": "Translate to French: good morning."}],
                     "completion": [{"role": "assistant", "content": "Bonjour."}]}]
CLEAN_TEXT = [{"text": "The capital of France is Paris."}, {"text": "A cat sat on the mat."}]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
