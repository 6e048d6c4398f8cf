"""The findings of sft-check: pure functions over one row's token arrays (ids, which tokens carry a label, each
token's role), after truncation to max_length the way TRL truncates (keep the start).

Each detector returns a detail string (the finding) or None. `check_row` runs them all on one row; what spans rows
(duplicates) is `duplicates`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from erroranalysis.sft.render import ANSWER, PROMPT, SYSTEM, TEMPLATE, stop_mask

KINDS = ("nothing_trained", "prompt_trained", "answer_truncated", "answer_dropped", "missing_eos", "eos_masked",
         "double_bos", "template_mismatch", "labels_shifted", "empty_answer", "duplicate_row", "too_long")

# what each kind means, for the summary, the terminal and the app
MEANINGS = {
    "nothing_trained": "every label is -100: the row adds no loss (0 or NaN), nothing is learned from it",
    "prompt_trained": "prompt tokens (system/user) carry labels where only the answer should",
    "answer_truncated": "max_length cuts the answer: part of it is trained, the end (and EOS) is not",
    "answer_dropped": "max_length cuts the whole answer away: only the prompt is left",
    "missing_eos": "the last trained token is not EOS or the end-of-turn token: the model never learns to stop",
    "eos_masked": "an EOS / end-of-turn token is present but its label is masked (often pad == eos)",
    "double_bos": "the row starts with two BOS tokens (template and tokenizer both add one)",
    "template_mismatch": "the tokens differ from the chat template's rendering: training and inference see different text",
    "labels_shifted": "labels are input_ids shifted by one: the model shifts again, training on the token after next",
    "empty_answer": "an answer is empty: the row teaches an empty reply",
    "duplicate_row": "the same tokens as an earlier row",
    "too_long": "longer than max_length: the trainer cuts it",
}


@dataclass
class RowView:
    """One row as the trainer trains on it: `ids`, `trained` (label not -100, shifts undone), `roles`, after
    truncation; `n_full`: tokens before truncation; `answer_full`: answer tokens (stop tokens aside) of the whole
    rendering."""

    ids: np.ndarray
    trained: np.ndarray
    roles: np.ndarray
    n_full: int
    answer_full: int


def nothing_trained(view: RowView, max_length: int | None) -> str | None:
    if view.trained.any():
        return None
    fate = "TRL drops it after truncation" if max_length is not None else "its loss is 0 or NaN"
    return f"all {len(view.ids)} labels are -100 ({fate})"


def prompt_trained(view: RowView, mode: str) -> str | None:
    if mode not in ("assistant-only", "completion-only"):
        return None
    in_prompt = (view.roles == SYSTEM) | (view.roles == PROMPT)
    n = int(np.count_nonzero(view.trained & in_prompt))
    if n == 0:
        return None
    return f"{n} of {int(np.count_nonzero(in_prompt))} prompt tokens carry labels ({mode})"


def answer_tokens(roles: np.ndarray, ids: np.ndarray, stop_ids) -> int:
    """Answer tokens other than stop tokens: a row cut right before its EOS keeps its whole answer (and misses
    the EOS: missing_eos)."""
    return int(np.count_nonzero((roles == ANSWER) & ~stop_mask(ids, stop_ids)))


def answer_cut(view: RowView, max_length: int | None, stop_ids=frozenset()) -> tuple[str, str] | None:
    """("answer_truncated" | "answer_dropped", detail) when truncation takes answer tokens away."""
    if view.answer_full == 0:
        return None
    kept = answer_tokens(view.roles, view.ids, stop_ids)
    if kept >= view.answer_full:
        return None
    where = f"max_length {max_length}" if max_length is not None and view.n_full > max_length else \
        f"the row ends at token {len(view.ids)}"
    if kept == 0:
        return "answer_dropped", f"all {view.answer_full} answer tokens cut ({where}; {view.n_full} tokens in all)"
    return "answer_truncated", f"{kept} of {view.answer_full} answer tokens kept ({where})"


def stop_problems(view: RowView, stop_ids: frozenset) -> tuple[str | None, str | None]:
    """(missing_eos, eos_masked) details. The last trained token that is not the template's own text should be a
    stop token (EOS or end-of-turn); one that follows a trained token with its own label masked is eos_masked."""
    if not stop_ids or not view.trained.any():
        return None, None
    is_stop = stop_mask(view.ids, stop_ids)
    masked = np.flatnonzero(is_stop[1:] & ~view.trained[1:] & view.trained[:-1]) + 1
    eos_masked = None
    if len(masked):
        eos_masked = (f"{len(masked)} stop token(s) with a masked label, after a trained token (position "
                      f"{int(masked[0])})")
    content = np.flatnonzero(view.trained & (view.roles != TEMPLATE))
    last = int(content[-1]) if len(content) else int(np.flatnonzero(view.trained)[-1])
    if is_stop[last]:
        return None, eos_masked
    if last + 1 < len(view.ids) and is_stop[last + 1] and not view.trained[last + 1]:
        return None, eos_masked or f"the stop token after the last trained token (position {last + 1}) is masked"
    cut = " (max_length cuts it)" if view.n_full > len(view.ids) else ""
    return (f"the last trained token (position {last} of {len(view.ids)}) is not a stop token{cut}", eos_masked)


def double_bos(ids: np.ndarray, bos_id: int | None) -> str | None:
    if bos_id is None or len(ids) < 2 or ids[0] != bos_id or ids[1] != bos_id:
        return None
    n = 2
    while n < len(ids) and ids[n] == bos_id:
        n += 1
    return f"{n} BOS tokens at the start"


def labels_shifted(ids: np.ndarray, labels: np.ndarray) -> str | None:
    """Labels that equal the next input id (where not -100) more often than the same one: shifted by hand, while
    the model shifts them again."""
    if len(ids) < 2:
        return None
    given = labels[:-1] != -100
    n = int(np.count_nonzero(given))
    if n == 0:
        return None
    shifted = int(np.count_nonzero(given & (labels[:-1] == ids[1:])))
    same = int(np.count_nonzero(given & (labels[:-1] == ids[:-1])))
    if shifted < 0.9 * n or shifted <= same:
        return None
    return f"{shifted} of {n} labels equal the next input id"


def empty_answer(answers: list[str], conversational: bool, text_rows: bool) -> str | None:
    if text_rows:
        return None
    if not answers:
        return "no assistant message" if conversational else None
    empty = sum(1 for a in answers if not a.strip())
    if not empty:
        return None
    return "the answer is empty" if len(answers) == 1 else f"{empty} of {len(answers)} answers are empty"


def too_long(n_full: int, max_length: int | None) -> str | None:
    if max_length is None or n_full <= max_length:
        return None
    return f"{n_full} tokens, max_length {max_length}: {n_full - max_length} cut"


def row_hash(ids: np.ndarray) -> bytes:
    return hashlib.blake2b(np.ascontiguousarray(ids, dtype=np.int64).tobytes(), digest_size=16).digest()


def duplicates(hashes: list[bytes]) -> dict[int, int]:
    """Row -> the first earlier row with the same tokens."""
    first: dict[bytes, int] = {}
    found = {}
    for i, h in enumerate(hashes):
        if h in first:
            found[i] = first[h]
        else:
            first[h] = i
    return found


def check_row(view: RowView, *, mode: str, max_length: int | None, stop_ids: frozenset, bos_id: int | None,
              answers: list[str], conversational: bool, text_rows: bool, shifted: str | None = None,
              mismatch: str | None = None) -> list[tuple[str, str]]:
    """Every finding of one row, as (kind, detail)."""
    found: list[tuple[str, str]] = []

    def add(kind: str, detail: str | None) -> None:
        if detail:
            found.append((kind, detail))

    add("labels_shifted", shifted)
    add("template_mismatch", mismatch)
    add("too_long", too_long(view.n_full, max_length))
    add("nothing_trained", nothing_trained(view, max_length))
    add("prompt_trained", prompt_trained(view, mode))
    cut_answer = answer_cut(view, max_length, stop_ids)
    if cut_answer:
        add(*cut_answer)
    missing, masked = stop_problems(view, stop_ids)
    add("missing_eos", missing if not cut_answer else None)  # a cut answer has lost its EOS: that finding says so
    add("eos_masked", masked)
    add("double_bos", double_bos(view.ids, bos_id))
    add("empty_answer", empty_answer(answers, conversational, text_rows))
    return found
