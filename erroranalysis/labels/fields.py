"""What a label's fields may hold, and the one rule for comparing error-type names.

Names are compared by `fold_name`: NFKC-normalised, format and control characters removed, whitespace collapsed,
`str.casefold`ed. SQLite's NOCASE folds
ASCII only, so "Zoë" and "ZOË" were two names to it and one to everything else; the store keeps the folded form in
`error_types.name_key` (unique) and every comparison of names (store, import, the app) goes through this function.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from typing import Any

from erroranalysis.core.errors import ParameterError
from erroranalysis.core.validation import check_param

MAX_NAME = 80
MAX_TEXT = 10_000
SEVERITIES = ("low", "medium", "high", "critical")
SOURCES = ("human", "suggested")
STATUSES = ("accepted", "pending", "rejected")
FLAGS = ("label_wrong", "not_error")
FLAG_TITLES = {"label_wrong": "label is wrong", "not_error": "not an error"}


def display_name(name: Any) -> str:
    """A name as stored and shown: one space between words, NFC-normalised."""
    return unicodedata.normalize("NFC", " ".join(str("" if name is None else name).split()))


def fold_name(name: Any) -> str:
    """The key two names are compared by: equal keys mean the same error type. Compatibility forms are one
    (NFKC: "ﬁ" is "fi", a full-width "Ｚ" is "Z"), format and control characters (zero-width spaces and joiners,
    bidi overrides, ESC, NUL) count for nothing, and case is folded."""
    text = "".join(c for c in unicodedata.normalize("NFKC", str("" if name is None else name))
                   if unicodedata.category(c) not in ("Cf", "Cc") or c.isspace())
    return unicodedata.normalize("NFKC", " ".join(text.split()).casefold())


def clean_name(name: Any) -> str:
    text = display_name(name)
    check_param("name", name, bool(text), "a non-empty error type name")
    check_param("name", name, len(text) <= MAX_NAME, f"at most {MAX_NAME} characters")
    return text


def clean_text(what: str, text: Any) -> str:
    text = "" if text is None else str(text).strip()
    check_param(what, text[:40] + "...", len(text) <= MAX_TEXT, f"at most {MAX_TEXT} characters")
    return text


def check_severity(severity: Any) -> None:
    check_param("severity", severity, severity in SEVERITIES, f"one of {', '.join(SEVERITIES)}")


def clean_run(run: Any) -> str:
    text = str(run or "").strip()
    check_param("run", run, bool(text), "a run name")
    return text


def clean_ids(example_ids: Iterable[Any]) -> list[str]:
    """Example ids as strings, each once, in the order given."""
    if isinstance(example_ids, (str, bytes)):
        raise ParameterError("example_ids", example_ids, "a list of example ids, not a string")
    seen: dict[str, None] = {}
    for ex in example_ids:
        text = str(ex)
        check_param("example_id", ex, text != "", "a non-empty example id")
        seen.setdefault(text, None)
    return list(seen)
