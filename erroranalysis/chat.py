"""Chat messages as users give them in a `messages`, `prompt` or `completion` cell: the one reader for the
generation task, the memorization check and sft-check."""

from __future__ import annotations

import json

import numpy as np

from erroranalysis.core.errors import DataError


def parse_messages(value, at: str) -> list[dict]:
    """One conversation: a non-empty list of {"role": str, "content": str} objects (other keys kept for the chat
    template), given as a list, a Parquet array or a JSON string; else a DataError at `at` (file, line and column,
    from `errors.where`) saying what is wrong."""
    if isinstance(value, np.ndarray):  # Parquet lists come back as arrays
        value = value.tolist()
    if isinstance(value, str) and value.lstrip().startswith("["):  # a CSV cell holds the list as JSON
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise DataError(f"{at}: not valid JSON ({exc.msg} at character {exc.colno}); write the messages as a "
                            "JSON list.") from None
    if not isinstance(value, list) or not value:
        shown = "an empty list" if isinstance(value, list) else "nothing" if is_missing(value) else \
            f"a {type(value).__name__}"
        raise DataError(f"{at}: holds {shown}; expected a list of messages like "
                        '[{"role": "user", "content": "..."}, {"role": "assistant", "content": "..."}].')
    out = []
    for k, message in enumerate(value):
        if not isinstance(message, dict):
            raise DataError(f'{at}: message {k} is a {type(message).__name__}, not an object with "role" and '
                            '"content".')
        role, content = message.get("role"), message.get("content")
        if not isinstance(role, str) or not role:
            raise DataError(f'{at}: message {k} has no "role" string; give each message a role (system, user, '
                            'assistant).')
        if not isinstance(content, str):
            shown = "no" if content is None else f"a {type(content).__name__}"
            raise DataError(f'{at}: message {k} ({role}) has {shown} "content"; each message needs its text as a '
                            'string.')
        out.append({key: _plain(v) for key, v in message.items()})
    return out


def is_missing(value) -> bool:
    """An empty cell: None, or NaN as pandas reads one."""
    return value is None or (isinstance(value, float) and np.isnan(value))


def _plain(value):
    """Parquet gives nested lists as arrays; templates expect Python lists."""
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value.tolist()]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value
