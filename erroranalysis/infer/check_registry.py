"""The registry of output checks and what checkers share: `register` (a decorator), `CHECKERS`, the
`CheckContext` passed to each, and the text helpers most checks use (`normalize`, `extract_json`, `reason`).
The checks themselves live in `output_checks` (formats), `scorers` (free-form answers), `output_signals` and
`reference_diff`, each registering itself here; `output_checks` imports them all, so importing it fills
`CHECKERS`."""

from __future__ import annotations

import json
import re
import string
import unicodedata
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

REASON_LIMIT = 200


@dataclass(frozen=True)
class Checker:
    """A named check: `func(output, row, context) -> (passed, reason)`; `needs` are the row fields it reads."""

    name: str
    func: Callable[[str, Mapping[str, Any], "CheckContext"], tuple[bool | None, str]]
    needs: tuple[str, ...]
    description: str


@dataclass
class CheckContext:
    """What checkers share across rows: the allowed labels, the scorers' thresholds (`scorers.ScorerParams`),
    compiled validators by schema, and what a checker makes once (`cache`)."""

    labels: Sequence[str] = ()
    _validators: dict | None = None
    scoring: Any = None
    cache: dict = field(default_factory=dict)

    def validator(self, schema: Any):
        from jsonschema import validators

        key = json.dumps(schema, sort_keys=True)
        if self._validators is None:
            self._validators = {}
        if key not in self._validators:
            cls = validators.validator_for(schema)
            self._validators[key] = cls(schema)
        return self._validators[key]


CHECKERS: dict[str, Checker] = {}


def register(name: str, needs: Iterable[str] = (), description: str = ""):
    """Add a checker to the registry (a decorator); later `--checks` and `checks` cells can name it."""

    def wrap(func):
        CHECKERS[name] = Checker(name=name, func=func, needs=tuple(needs), description=description)
        return func

    return wrap


def reason(text: str) -> str:
    """A failure reason on one line, at most REASON_LIMIT characters."""
    text = " ".join(str(text).split())
    return text if len(text) <= REASON_LIMIT else text[:REASON_LIMIT - 3] + "..."


_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation + "“”‘’«»…–—")
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n?(.*?)```", re.DOTALL)


def normalize(text: str) -> str:
    """Lower-case, NFKC, no punctuation, no English articles, single spaces (SQuAD-style answer normalization)."""
    text = unicodedata.normalize("NFKC", str(text)).casefold().translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def extract_json(text: str) -> tuple[Any, str, str]:
    """The JSON value in an output, how it was found and why not.

    Returns (value, how, error): how is "strict" (the whole output), "fenced" (inside a ``` code fence) or
    "embedded" (the first object or array inside other text); (None, "none", message) when there is none.
    """
    stripped = str(text).strip()
    if not stripped:
        return None, "none", "empty output"
    try:
        return json.loads(stripped), "strict", ""
    except json.JSONDecodeError as exc:
        error = f"{exc.msg.removesuffix(' at')} at character {exc.pos}"
    for match in _FENCE.finditer(stripped):
        try:
            return json.loads(match.group(2).strip()), "fenced", ""
        except json.JSONDecodeError:
            continue
    decoder = json.JSONDecoder()
    for i, ch in enumerate(stripped):
        if ch in "{[":
            try:
                value, _ = decoder.raw_decode(stripped, i)
                return value, "embedded", ""
            except json.JSONDecodeError:
                continue
    return None, "none", error
