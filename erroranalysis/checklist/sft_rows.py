"""SFT rows as the memorization check trains them: prompt ids, answer ids (through the end-of-turn token) and the
training sequence with answer-only labels, rendered as TRL renders them; or the rows' own `input_ids` and
`labels`. This is the check's own minimal masking; `erroranalysis sft-check` checks a whole file's."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np

from erroranalysis.core.errors import DataError, preview, where
from erroranalysis.sources.messages import parse_messages

IGNORE = -100


@dataclass
class Example:
    """One SFT row as the check trains and scores it."""

    row: int  # 0-based row of the file
    line: int
    prompt_ids: list[int]
    answer_ids: list[int]  # what greedy decoding must reproduce (through the end-of-turn token)
    train_ids: list[int]  # the sequence trained on, cut at max_length
    train_labels: list[int]  # -100 where no loss is taken
    answer_text: str
    given_labels: bool = False



# -- rows to token ids -------------------------------------------------------------------------------------------


def encode_row(lm, row, index: int, source: str, max_length: int) -> Example:
    """One SFT row as prompt ids, answer ids and the (cut) training sequence with answer-only labels, or with the
    row's own `input_ids`/`labels`."""
    line = int(row["_line"]) if "_line" in row else index + 1
    given = "input_ids" in row and "labels" in row
    has_text = any(c in row for c in ("messages", "prompt"))
    if has_text:
        prompt_ids, answer_ids, answer_text = render(lm, row, source, line)
    elif given:
        prompt_ids, answer_ids, answer_text = _from_labels(lm, row, source, line)
    else:
        found = [c for c in row.index if c != "_line"]
        raise DataError(f"{source}: no SFT column (columns found: {preview(found, 8)}); give 'messages', or "
                        "'prompt' and 'completion', or 'input_ids' and 'labels'.")
    if given:
        ids, labels = _ids(row["input_ids"], source, line, "input_ids"), _ids(row["labels"], source, line, "labels")
        if len(ids) != len(labels):
            raise DataError(f"{where(source, line, 'labels')}: {len(labels)} labels for {len(ids)} input_ids; give "
                            "one label per token (-100 where no loss is taken).")
        train_ids, train_labels = ids[:max_length], labels[:max_length]
    else:
        full = prompt_ids + through_eos(answer_ids, lm.eos_ids, keep_rest=True)
        train_ids = full[:max_length]
        train_labels = ([IGNORE] * len(prompt_ids) + full[len(prompt_ids):])[:max_length]
    return Example(index, line, prompt_ids, through_eos(answer_ids, lm.eos_ids), train_ids, train_labels,
                   answer_text, given)


def render(lm, row, source: str, line: int) -> tuple[list[int], list[int], str]:
    """(prompt ids, answer ids with the rest of the template's turn, answer text) of a messages or prompt/completion
    row, rendered as TRL renders it."""
    tok = lm.tokenizer
    if "messages" in row:
        messages = parse_messages(row["messages"], where(source, line, "messages"))
        if messages[-1]["role"] != "assistant":
            raise DataError(f"{where(source, line, 'messages')}: the last message is {messages[-1]['role']!r}, not "
                            "the assistant's; the last assistant turn is the answer to memorize.")
        return _chat(lm, messages[:-1], messages[-1]["content"], source, line)
    prompt, completion = row["prompt"], row.get("completion")
    if completion is None or (isinstance(completion, float) and math.isnan(completion)):
        raise DataError(f"{where(source, line, 'completion')}: missing; each prompt needs its completion (the answer "
                        "to memorize).")
    if isinstance(prompt, str) and isinstance(completion, str):
        prompt_ids = tok(prompt, add_special_tokens=True)["input_ids"]
        answer_ids = tok(completion, add_special_tokens=False)["input_ids"] + list(lm.eos_ids[:1])
        return prompt_ids, answer_ids, completion
    if isinstance(prompt, str):
        prompt = [{"role": "user", "content": prompt}]
    turns = parse_messages(prompt, where(source, line, "prompt"))
    answer = parse_messages(completion, where(source, line, "completion")) if not isinstance(completion, str) else (
        [{"role": "assistant", "content": completion}])
    return _chat(lm, turns, answer[-1]["content"], source, line)


def _chat(lm, turns: list[dict], answer: str, source: str, line: int) -> tuple[list[int], list[int], str]:
    tok = lm.tokenizer
    if not lm.has_chat_template:
        raise DataError(f"{where(source, line)}: conversational rows need a chat template, and {lm.path}'s tokenizer "
                        "has none; give prompt/completion strings or a chat model.")
    prompt_text = tok.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)
    full_text = tok.apply_chat_template(turns + [{"role": "assistant", "content": answer}], tokenize=False)
    if full_text.startswith(prompt_text):
        answer_part = full_text[len(prompt_text):]
    else:  # a template whose generation prompt is not a prefix of the conversation: answer and end of turn
        answer_part = answer + (tok.eos_token or "")
    prompt_ids = tok(prompt_text, add_special_tokens=False)["input_ids"]
    answer_ids = tok(answer_part, add_special_tokens=False)["input_ids"]
    return prompt_ids, answer_ids, answer


def _from_labels(lm, row, source, line) -> tuple[list[int], list[int], str]:
    """Prompt and answer of a tokenized row alone: the answer starts at the first labeled token."""
    ids, labels = _ids(row["input_ids"], source, line, "input_ids"), _ids(row["labels"], source, line, "labels")
    first = next((i for i, y in enumerate(labels) if y != IGNORE), len(ids))
    answer = ids[first:]
    return ids[:first], answer, lm.tokenizer.decode(answer, skip_special_tokens=True)


def through_eos(ids: list[int], eos: tuple[int, ...], keep_rest: bool = False) -> list[int]:
    """The answer up to and including its first end-of-turn token (the rest of the turn with `keep_rest`)."""
    if keep_rest:
        return list(ids)
    for i, t in enumerate(ids):
        if t in eos:
            return list(ids[:i + 1])
    return list(ids)


def _ids(value, source, line, column) -> list[int]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise DataError(f"{where(source, line, column)}: not a list of token ids; write a JSON list of "
                            "integers.") from None
    if hasattr(value, "tolist"):
        value = value.tolist()
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise DataError(f"{where(source, line, column)}: {preview([value], 1)} is not a list of integers.")
    return value


def input_facts(examples: list[Example], max_length: int) -> dict:
    """What masking and the cut leave to learn: trained tokens per row, answers cut or dropped by max_length,
    labels on prompt tokens."""
    trained = np.array([sum(y != IGNORE for y in e.train_labels) for e in examples], dtype=np.int64)
    answer_len = np.array([len(e.answer_ids) for e in examples], dtype=np.int64)
    room = np.array([max_length - len(e.prompt_ids) for e in examples], dtype=np.int64)
    prompt_labeled = [_prompt_labeled(e) for e in examples]
    checked = [p for p in prompt_labeled if p is not None]
    return {
        "max_length": int(max_length),
        "given_labels": bool(examples and examples[0].given_labels),
        "mean_prompt_tokens": float(np.mean([len(e.prompt_ids) for e in examples])) if examples else 0.0,
        "mean_answer_tokens": float(answer_len.mean()) if examples else 0.0,
        "trained_tokens": int(trained.sum()),
        "rows_without_trained_tokens": [e.row for e, t in zip(examples, trained) if t == 0][:20],
        "n_rows_without_trained_tokens": int((trained == 0).sum()),
        "n_answer_truncated": int(((room < answer_len) & (room > 0)).sum()),
        "n_answer_dropped": int((room <= 0).sum()),
        "prompt_labeled_share": float(np.mean(checked)) if checked else None,
    }


def _prompt_labeled(e: Example) -> float | None:
    """Share of the prompt's tokens that carry a label, when the row's ids start with the rendered prompt."""
    p = len(e.prompt_ids)
    if not p or e.train_ids[:p] != e.prompt_ids:
        return None
    return float(np.mean([y != IGNORE for y in e.train_labels[:p]]))


def shuffle_answers(lm, examples: list[Example], seed: int, max_length: int) -> list[Example]:
    """The control: the same answers, each moved to another prompt (a random derangement when n >= 2)."""
    n = len(examples)
    order = np.random.default_rng(seed).permutation(n)
    while n >= 2 and (order == np.arange(n)).any():
        fixed = np.flatnonzero(order == np.arange(n))
        swap = (fixed + 1) % n
        order[fixed], order[swap] = order[swap], order[fixed].copy()
    out = []
    for e, k in zip(examples, order):
        other = examples[int(k)]
        full = e.prompt_ids + other.answer_ids
        out.append(Example(e.row, e.line, e.prompt_ids, other.answer_ids, full[:max_length],
                           ([IGNORE] * len(e.prompt_ids) + other.answer_ids)[:max_length], other.answer_text))
    return out
