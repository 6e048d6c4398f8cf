"""SFT rows as the memorization check trains them: prompt ids, answer ids (through the end-of-turn token) and the
training sequence with answer-only labels, or the rows' own `input_ids` and `labels`.

The rendering and masking are sft-check's (`erroranalysis.sft.render`, TRL's own rules), so the labels the check
trains with are the trained spans `erroranalysis sft-check` reports: `messages` rows as with `--assistant-only`
(TRL's assistant_only_loss), `prompt`/`completion` rows as with TRL's default completion_only_loss. The answer to
memorize is the row's last trained span.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from erroranalysis.core.errors import DataError, preview, where

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

# The answer-only mode of each format, as `erroranalysis sft-check` names it (sft.params.MODES)
ANSWER_ONLY = {"messages": "assistant-only", "prompt_completion": "completion-only"}
TEXT_COLUMNS = ("messages", "prompt", "completion")


def encode_rows(lm, frame, positions, source: str, max_length: int) -> list[Example]:
    """The rows at `positions` (0-based) of `frame` (read_table's, with `_line`) as Examples: rendered together."""
    chosen = frame.iloc[list(positions)]
    rendered = render(lm, chosen, source) if any(c in frame.columns for c in TEXT_COLUMNS) else None
    return [encode_row(lm, row, int(i), source, max_length, rendered[k] if rendered else None)
            for k, (i, (_, row)) in enumerate(zip(positions, chosen.iterrows()))]


def encode_row(lm, row, index: int, source: str, max_length: int, rendered=None) -> Example:
    """One SFT row as prompt ids, answer ids and the (cut) training sequence with answer-only labels, or with the
    row's own `input_ids`/`labels`. `rendered`: the row's (ids, labels, answer start, answer text) from `render`."""
    line = int(row["_line"]) if "_line" in row else index + 1
    given = "input_ids" in row and "labels" in row
    if rendered is None and any(c in row for c in TEXT_COLUMNS):
        rendered = render(lm, row.to_frame().T.assign(_line=line), source)[0]
    if rendered is not None:
        ids, labels, start, answer_text = rendered
        prompt_ids, answer_ids = ids[:start], ids[start:]
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
    return Example(index, line, prompt_ids, through_eos(answer_ids, lm.eos_ids), ids[:max_length],
                   labels[:max_length], answer_text, given)


def render(lm, frame, source: str) -> list[tuple[list[int], list[int], int, str]]:
    """Per row of `frame` (messages or prompt/completion rows, with `_line`): its ids and labels as sft-check renders
    and masks them (TRL's answer-only mode of the format), where its last trained span starts, the answer's text."""
    from erroranalysis.sft.render import render as sft_render
    from erroranalysis.sft.rows import rows_of
    from erroranalysis.sft.tokenizer import facts

    rows = rows_of(frame[[c for c in (*TEXT_COLUMNS, "text", "_line") if c in frame.columns]], source)
    if rows.format not in ANSWER_ONLY:
        raise DataError(f"{source}: plain 'text' rows have no answer to memorize; give 'messages', or 'prompt' and "
                        "'completion', or 'input_ids' and 'labels'.")
    if rows.format == "messages":
        for conv, line in zip(rows.conversations, rows.lines):
            if conv[-1]["role"] != "assistant":
                raise DataError(f"{where(source, int(line), 'messages')}: the last message is {conv[-1]['role']!r}, "
                                "not the assistant's; the last assistant turn is the answer to memorize.")
    encoded = sft_render(rows, facts(lm.tokenizer, str(lm.path)), ANSWER_ONLY[rows.format])
    out = []
    for enc, answers in zip(encoded, rows.answers()):
        ids = enc.ids.tolist()
        labels = np.where(enc.trained, enc.ids, IGNORE).tolist()
        out.append((ids, labels, last_span_start(enc.trained), answers[-1] if answers else ""))
    return out


def last_span_start(trained: np.ndarray) -> int:
    """Where the last run of trained tokens starts (the length when nothing is trained)."""
    at = np.flatnonzero(trained)
    if not len(at):
        return len(trained)
    breaks = np.flatnonzero(np.diff(at) > 1)
    return int(at[breaks[-1] + 1]) if len(breaks) else int(at[0])


def _from_labels(lm, row, source, line) -> tuple[list[int], list[int], str]:
    """Prompt and answer of a tokenized row alone: the answer starts at the first labeled token."""
    ids, labels = _ids(row["input_ids"], source, line, "input_ids"), _ids(row["labels"], source, line, "labels")
    first = next((i for i, y in enumerate(labels) if y != IGNORE), len(ids))
    answer = ids[first:]
    return ids[:first], answer, lm.tokenizer.decode(answer, skip_special_tokens=True)


def through_eos(ids: list[int], eos: tuple[int, ...]) -> list[int]:
    """The answer up to and including its first end-of-turn token."""
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
