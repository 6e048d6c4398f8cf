"""OpenAI-style chat JSONL: one conversation a line, `{"messages": [..., {"role": "assistant", ...}], ...}`.

The last message is the model's answer (`output`; its `tool_calls`, when it made calls, as `{"tool_calls":
[...]}`, which the tool_call check reads), the ones before it the prompt (`messages`). Content given as a list of
parts keeps its text parts. Every other key of the line (`tools`, `reference`, `label`, an id, metadata) is a
column as in any table.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from erroranalysis.core.errors import DataError, where
from erroranalysis.sources.table import jsonl_records


def read_chat(path: Path, *, encoding: str = "utf-8") -> pd.DataFrame:
    """The conversations as a table with `_line` (the file's line numbers)."""
    rows = [_row(record, path, number) for number, record in jsonl_records(path, encoding)]
    if not rows:
        raise DataError(f"{path}: no conversations; write one {{\"messages\": [...]}} object per line.")
    return pd.DataFrame.from_records(rows)


def _row(record, path: Path, number: int) -> dict:
    messages = record.get("messages") if isinstance(record, dict) else None
    if not isinstance(messages, list) or len(messages) < 2 or not all(isinstance(m, dict) for m in messages):
        raise DataError(f"{where(path, number, 'messages')}: expected a list of at least two messages, the last "
                        "the assistant's answer.")
    answer = messages[-1]
    if answer.get("role") != "assistant":
        raise DataError(f"{where(path, number, 'messages')}: the last message is the {answer.get('role')!r}'s; "
                        "the last message must be the assistant's answer (the output to analyze).")
    row = {k: v for k, v in record.items() if k != "messages"}
    row["messages"] = [{"role": str(m.get("role")), "content": _content(m)} for m in messages[:-1]]
    row["output"] = _content(answer)
    row["_line"] = number
    return row


def _content(message: dict) -> str:
    calls = message.get("tool_calls")
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    content = content if isinstance(content, str) else ""
    if calls and not content.strip():
        return json.dumps({"tool_calls": calls}, ensure_ascii=False)
    return content
