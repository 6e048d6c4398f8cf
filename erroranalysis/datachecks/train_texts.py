"""The text of supervised fine-tuning rows, for the checks that compare training data with a generation run's eval
set (contamination, near-duplicate prompts, lengths).

Rows come in the formats TRL documents: `messages` (conversational), `prompt`/`completion` (each a string or a
list of messages), or `text`. A row's prompt is its system and user turns (or its `prompt`), its answer the
assistant turns (or its `completion`), its text both. This reads contents only, with no chat template: the
n-gram checks compare words, not tokens. (The sft-check command renders rows the way a trainer does.)
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from erroranalysis.core.errors import DataError, preview, where
from erroranalysis.sources.messages import parse_messages

FORMATS = ("messages", "prompt/completion", "prompt", "text")
ANSWER_ROLES = ("assistant",)


def sft_format(columns) -> str:
    """Which format the columns hold, or a DataError listing what was found."""
    have = set(columns)
    if "messages" in have:
        return "messages"
    if "prompt" in have and "completion" in have:
        return "prompt/completion"
    if "prompt" in have:
        return "prompt"
    if "text" in have:
        return "text"
    raise DataError(f"no column of a training format (columns found: {preview(sorted(have - {'_line'}), 8)}); "
                    "give 'messages', 'prompt' and 'completion', or 'text' (the formats TRL reads), or name the "
                    "text column with --train-text-column.")


def sft_texts(frame: pd.DataFrame, source: str, text_column: str | None = None) -> pd.DataFrame:
    """Columns `prompt`, `answer` and `text` (prompt and answer on separate lines) for each row of `frame` (a table
    with `_line`); `text_column` reads that column as plain text instead. A bad cell is a DataError naming the
    file, line and column."""
    lines = frame["_line"].to_numpy() if "_line" in frame else np.arange(1, len(frame) + 1)
    if text_column is not None:
        if text_column not in frame.columns:
            raise DataError(f"{source}: no column {text_column!r} (columns found: "
                            f"{preview([c for c in frame.columns if c != '_line'], 8)}); fix --train-text-column.")
        prompts = [_plain(v, source, line, text_column) for v, line in zip(frame[text_column], lines)]
        answers = [""] * len(frame)
    else:
        try:
            fmt = sft_format(frame.columns)
        except DataError as exc:
            raise DataError(f"{source}: {exc}") from None
        prompts, answers = _split(frame, fmt, source, lines)
    texts = [p if not a else (a if not p else f"{p}\n{a}") for p, a in zip(prompts, answers)]
    return pd.DataFrame({"prompt": prompts, "answer": answers, "text": texts})


def _split(frame, fmt: str, source: str, lines) -> tuple[list[str], list[str]]:
    if fmt == "messages":
        pairs = [_turns(v, source, line, "messages") for v, line in zip(frame["messages"], lines)]
        return [p for p, _ in pairs], [a for _, a in pairs]
    if fmt == "text":
        return [_plain(v, source, line, "text") for v, line in zip(frame["text"], lines)], [""] * len(frame)
    prompts = [_either(v, source, line, "prompt")[0] for v, line in zip(frame["prompt"], lines)]
    if fmt == "prompt":
        return prompts, [""] * len(frame)
    answers = [_either(v, source, line, "completion") for v, line in zip(frame["completion"], lines)]
    return prompts, [" ".join(x for x in pa if x) for pa in answers]


def _plain(value, source, line, column) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return ""
    if not isinstance(value, str):
        raise DataError(f"{where(source, int(line), column)}: {preview([value], 1)} is not text; write a string.")
    return value


def _either(value, source, line, column) -> tuple[str, str]:
    """A prompt or completion cell: a string, or a list of messages (prompt turns, answer turns)."""
    if isinstance(value, str) or value is None:
        return _plain(value, source, line, column), ""
    return _turns(value, source, line, column)


def _turns(value, source, line, column) -> tuple[str, str]:
    """(the non-assistant contents, the assistant contents) of a list of {"role", "content"} messages."""
    value = parse_messages(value, where(source, int(line), column))
    prompt, answer = [], []
    for m in value:
        (answer if m["role"] in ANSWER_ROLES else prompt).append(m["content"])
    return "\n".join(prompt), "\n".join(answer)
