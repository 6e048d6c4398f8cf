"""SFT rows in the formats TRL documents: `messages` (conversational), `prompt`/`completion` (plain strings or
lists of messages) and `text`; each row checked when it is read, a bad one named by file, line and column.

A `text` column beside `messages` (or beside conversational prompt/completion) is kept as the rendering the user's
pipeline made: it is compared with the tokenizer's chat template (`template_mismatch`); the masks follow TRL,
which trains on the conversation when there is one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from erroranalysis.core.errors import DataError, preview, where
from erroranalysis.sources.messages import is_missing, parse_messages

FORMATS = ("messages", "prompt_completion", "text")


@dataclass
class SftRows:
    """The rows of one file. `conversations[i]`: row i's messages (for prompt/completion rows, prompt then
    completion); `prompt_lengths[i]`: how many of them are the prompt (conversational prompt/completion), else
    None; `prompts`/`completions`: plain prompt/completion strings; `texts`: the `text` column, when there is one;
    `lines`: each row's 1-based line (row) in the file, for messages."""

    path: str
    format: str
    conversational: bool
    lines: np.ndarray
    conversations: list[list[dict]] | None = None
    prompt_lengths: list[int] | None = None
    prompts: list[str] | None = None
    completions: list[str] | None = None
    texts: list[str] | None = None
    sources: list[str] | None = None

    def __len__(self) -> int:
        return len(self.lines)

    def answers(self) -> list[list[str]]:
        """Each row's answer texts: its assistant turns (the completion's, for prompt/completion rows), the plain
        completion, or nothing for text rows."""
        if self.conversations is not None:
            starts = self.prompt_lengths or [0] * len(self)
            return [[m["content"] for m in conv[start:] if m["role"] == "assistant"]
                    for conv, start in zip(self.conversations, starts)]
        if self.completions is not None:
            return [[c] for c in self.completions]
        return [[] for _ in range(len(self))]


def read_rows(path, *, source_column: str | None = None, encoding: str = "utf-8") -> SftRows:
    """The SFT rows of `path` (.jsonl, .csv, .parquet or a save_to_disk folder), validated."""
    from erroranalysis.sources.table import as_source, read_table

    source = as_source(path)
    frame, _ = read_table(source, encoding=encoding)
    return rows_of(frame, str(source), source_column)


def rows_of(frame, name: str, source_column: str | None = None) -> SftRows:
    """SftRows from a table with a `_line` column (what `erroranalysis.sources.table.read_table` returns)."""
    columns = [c for c in frame.columns if c != "_line"]
    lines = frame["_line"].to_numpy(dtype=np.int64)
    fmt = detect_format(columns, name)
    texts = _strings(frame, "text", name, lines) if "text" in columns else None
    if fmt == "messages":
        conversations = [parse_messages(v, where(name, int(n), "messages"))
                         for v, n in zip(frame["messages"], lines)]
        rows = SftRows(name, fmt, True, lines, conversations=conversations, texts=texts)
    elif fmt == "prompt_completion":
        rows = _prompt_completion(frame, name, lines, texts)
    else:
        rows = SftRows(name, fmt, False, lines, texts=texts)
    if source_column is not None:
        if source_column not in columns:
            raise DataError(f"{name}: no source column {source_column!r}; columns found: {preview(columns)}; fix "
                            "--source-column.")
        rows.sources = ["" if is_missing(v) else str(v) for v in frame[source_column]]
    return rows


def detect_format(columns: list[str], name: str) -> str:
    """TRL's order: a prompt column makes prompt/completion rows, then messages, then text."""
    if "prompt" in columns or "completion" in columns:
        missing = "completion" if "prompt" in columns else "prompt"
        if missing not in columns:
            raise DataError(f"{name}: a {'prompt' if missing == 'completion' else 'completion'!r} column without "
                            f"{missing!r}; TRL's prompt/completion format needs both columns.")
        return "prompt_completion"
    if "messages" in columns:
        return "messages"
    if "text" in columns:
        return "text"
    raise DataError(f"{name}: no 'messages', 'prompt'/'completion' or 'text' column (columns found: "
                    f"{preview(columns)}); write the rows in one of TRL's SFT formats.")


def _prompt_completion(frame, name: str, lines: np.ndarray, texts) -> SftRows:
    first = frame["prompt"].iloc[0]
    conversational = not isinstance(first, str) and not is_missing(first)
    if not conversational:
        return SftRows(name, "prompt_completion", False, lines, prompts=_strings(frame, "prompt", name, lines),
                       completions=_strings(frame, "completion", name, lines), texts=texts)
    conversations, lengths = [], []
    for prompt, completion, line in zip(frame["prompt"], frame["completion"], lines):
        head = parse_messages(prompt, where(name, int(line), "prompt"))
        tail = parse_messages(completion, where(name, int(line), "completion"))
        conversations.append(head + tail)
        lengths.append(len(head))
    return SftRows(name, "prompt_completion", True, lines, conversations=conversations, prompt_lengths=lengths,
                   texts=texts)


def _strings(frame, column: str, name: str, lines: np.ndarray) -> list[str]:
    values = frame[column].tolist()
    for value, line in zip(values, lines):
        if not isinstance(value, str):
            shown = "nothing" if is_missing(value) else f"a {type(value).__name__}"
            raise DataError(f"{where(name, int(line), column)}: holds {shown}, not text; every row needs a string "
                            f"in {column!r}.")
    return values
