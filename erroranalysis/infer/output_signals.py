"""Signals: output checks that need no column, run on every generation output beside the checks the run names.

They say how an output fails rather than whether it is right, so the clustering can group failures by mode:

| name | applies | fails when |
| --- | --- | --- |
| shape | always (the JSON part when JSON is expected: a schema, tools, a JSON reference, an output that opens a JSON value) | the output is empty; text before or after the JSON, a code fence, a JSON prefix cut short, not valid JSON |
| length | the stop reason or the token limit is known | generation stopped at the token limit (`stop_reason` `length`, or `n_output_tokens` at `max_new_tokens`) |
| repetition | outputs of 12 tokens or more | a loop: an n-gram (1 to 40 tokens) repeated back to back, covering 30% of the output or more |
| refusal | always | the output opens by declining (phrase patterns: "I'm sorry, but I can't", "As an AI", ...) |
| language | both texts have 20 letters or more | the output's language (py3langid) is not the reference's, or the prompt's without a text reference |

`shape` steps aside where the row runs the `json` check (the same facts, told once). Reasons follow the checks'
form (`shape: text before the JSON`, `length: cut off at max_tokens (64 tokens)`), so they name the failure mode.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from erroranalysis.infer.check_registry import CheckContext, extract_json, register

SIGNALS = ("shape", "length", "repetition", "refusal", "language")
COVERED_BY = {"shape": ("json",)}  # a signal skipped in rows that run one of these checks
KNOWN_STOPS_UNKNOWN = ("", "unknown", "none", "nan", "null")
MIN_LETTERS = 20  # of both texts, for the language check: shorter texts are too often misread
MIN_LANG_PROB = 0.8  # py3langid's normalized probability over LANGUAGE_NAMES' languages
MIN_TOKENS = 12  # of an output, for the repetition check
MAX_PERIOD = 40
MIN_COVER = 0.3


def json_cut_short(text: str) -> bool:
    """The text from its first { or [ is an unfinished JSON value: a string or a bracket left open."""
    start = min([i for i in (text.find("{"), text.find("[")) if i >= 0], default=-1)
    if start < 0:
        return False
    depth, in_string, escape = 0, False, False
    for ch in text[start:]:
        if in_string:
            escape, in_string = (False, True) if escape else (ch == "\\", ch != '"')
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth <= 0:
                return False
    return in_string or depth > 0


def json_shape(output: str, stop_reason: Any = None) -> tuple[bool, str]:
    """(the output is one JSON value and nothing else, else how it is not): empty, a code fence, text before or
    after the JSON, a JSON prefix cut short (at the token limit when `stop_reason` is `length`), not valid JSON."""
    stripped = str(output).strip()
    value, how, error = extract_json(stripped)
    if how == "strict":
        return True, ""
    if how == "fenced":
        return False, "wrapped in a code fence"
    if how == "embedded":
        before, after = _around(stripped)
        side = "around" if before and after else "before" if before else "after"
        return False, f"text {side} the JSON"
    if not stripped:
        return False, "empty output"
    if "{" not in stripped and "[" not in stripped:
        return False, "no JSON in the output"
    if json_cut_short(stripped):
        where = "cut off at max_new_tokens" if str(stop_reason).lower() == "length" else "JSON cut short"
        return False, f"{where} ({error})"
    return False, f"not valid JSON ({error})"


def _around(text: str) -> tuple[str, str]:
    """The text before and after the first JSON object or array embedded in `text`."""
    decoder = json.JSONDecoder()
    for i, ch in enumerate(text):
        if ch in "{[":
            try:
                _, end = decoder.raw_decode(text, i)
            except json.JSONDecodeError:
                continue
            return text[:i].strip(), text[end:].strip()
    return text, ""


def expects_json(output: str, row: Mapping) -> bool:
    """JSON is the expected answer: the row has a schema or tools, its reference is a JSON object or array, or
    the output opens one (after a code fence or not)."""
    if row.get("schema") is not None or row.get("tools") is not None:
        return True
    reference = row.get("reference")
    if isinstance(reference, str) and reference.strip()[:1] in ("{", "["):
        try:
            json.loads(reference)
            return True
        except json.JSONDecodeError:
            pass
    head = str(output).lstrip()
    return head[:1] in ("{", "[") or head.startswith("```json")


@register("shape", description="the output is not empty and, when JSON is expected, is JSON alone")
def check_shape(output: str, row: Mapping, ctx: CheckContext) -> tuple[bool | None, str]:
    if not str(output).strip():
        return False, "shape: empty output"
    if not expects_json(output, row):
        return True, ""
    ok, why = json_shape(output, row.get("stop_reason"))
    return ok, "" if ok else f"shape: {why}"


@register("length", description="generation stopped before the token limit")
def check_length(output: str, row: Mapping, ctx: CheckContext) -> tuple[bool | None, str]:
    stop = str(row.get("stop_reason") or "").strip().lower()
    n = row.get("n_output_tokens")
    limit = ctx.cache.get("max_new_tokens")
    counted = n is not None and not (isinstance(n, float) and np.isnan(n))
    at_limit = bool(limit) and counted and int(n) >= int(limit)
    if stop == "length" or at_limit:
        return False, "length: cut off at max_tokens" + (f" ({int(n)} tokens)" if counted else "")
    if stop in KNOWN_STOPS_UNKNOWN and not limit:
        return None, ""
    return True, ""


_TOKEN = re.compile(r"\w+|[^\w\s]")


def find_loop(text: str) -> tuple[str, int] | None:
    """(the repeated n-gram, how many times) of the longest back-to-back loop covering at least `MIN_COVER` of the
    output's tokens (a one-token loop needs 6 repeats, a longer one 3); None when there is none. Text without
    spaces (Chinese, Japanese) is read by characters."""
    tokens = _TOKEN.findall(str(text).casefold())
    if len(tokens) < MIN_TOKENS and len(str(text)) >= 4 * MIN_TOKENS:
        tokens = [c for c in str(text) if not c.isspace()]
    n = len(tokens)
    if n < MIN_TOKENS:
        return None
    ids = np.unique(np.array(tokens, dtype=object).astype(str), return_inverse=True)[1].reshape(-1)
    best = None
    for period in range(1, min(MAX_PERIOD, n // 3) + 1):
        same = np.concatenate([[False], ids[period:] == ids[:-period], [False]])
        edges = np.flatnonzero(np.diff(same.astype(np.int8)))
        if not len(edges):
            continue
        starts, ends = edges[0::2], edges[1::2]
        k = int(np.argmax(ends - starts))
        run = int(ends[k] - starts[k])
        repeats = run // period + 1
        covered = run + period
        if repeats >= (6 if period == 1 else 3) and covered >= max(MIN_TOKENS, MIN_COVER * n):
            if best is None or covered > best[2]:
                best = (int(starts[k]), period, covered, repeats)
    if best is None:
        return None
    start, period, _, repeats = best
    joiner = "" if all(len(t) == 1 for t in tokens[start:start + period]) and " " not in str(text)[:200] else " "
    return joiner.join(tokens[start:start + period]), repeats


@register("repetition", description="no n-gram loop (an n-gram repeated back to back over 30% of the output)")
def check_repetition(output: str, row: Mapping, ctx: CheckContext) -> tuple[bool | None, str]:
    if len(str(output)) < MIN_TOKENS:
        return None, ""
    loop = find_loop(output)
    if loop is None:
        return True, ""
    gram, repeats = loop
    gram = gram if len(gram) <= 40 else gram[:37] + "..."
    return False, f"repetition: a loop ({gram!r} repeated {repeats} times)"


_REFUSALS = [re.compile(p, re.IGNORECASE) for p in (
    r"\b(?:i|we)\s*(?:am|'m|are|'re)\s+(?:so\s+|very\s+)?(?:sorry|afraid)\b[^.!?\n]{0,80}?\b(?:can ?not|can't|"
    r"unable|not able|won't|will not|must decline)\b",
    r"\b(?:i|we)(?:\s+|(?='))(?:can ?not|can't|won't(?: be able to)?|will not(?: be able to)?|am unable to|"
    r"'m unable to|am not able to|'m not able to|must decline to|have to decline to)\s+(?:help|assist|comply|"
    r"provide|fulfil|fulfill|answer|complete|process|share|create|generate|write|do that|do this|engage|support)",
    r"\bas an ai(?: language model| assistant)?\b",
    r"\b(?:i|we)\s+(?:must|have to|need to)\s+(?:respectfully\s+)?decline\b",
    r"\b(?:i'm|i am) not (?:comfortable|allowed|permitted)\b",
    r"\b(?:against|violates?) (?:my|our|the) (?:guidelines|policy|policies|usage policies)\b",
)]
REFUSAL_WINDOW = 300  # characters at the start of the output where a refusal is looked for


def find_refusal(text: str) -> str | None:
    """The refusal phrase at the start of an output (its first `REFUSAL_WINDOW` characters), or None."""
    head = str(text)[:REFUSAL_WINDOW].replace("’", "'")
    for pattern in _REFUSALS:
        found = pattern.search(head)
        if found:
            return found.group(0)
    return None


@register("refusal", description="the output does not open by declining to answer")
def check_refusal(output: str, row: Mapping, ctx: CheckContext) -> tuple[bool | None, str]:
    if not str(output).strip():
        return None, ""
    phrase = find_refusal(output)
    if phrase is None:
        return True, ""
    return False, f"refusal: declines to answer ({phrase!r})"


LANGUAGE_NAMES = {
    "en": "English", "fr": "French", "de": "German", "es": "Spanish", "it": "Italian", "pt": "Portuguese",
    "nl": "Dutch", "ru": "Russian", "zh": "Chinese", "ja": "Japanese", "ko": "Korean", "ar": "Arabic",
    "hi": "Hindi", "tr": "Turkish", "pl": "Polish", "sv": "Swedish", "da": "Danish", "no": "Norwegian",
    "fi": "Finnish", "cs": "Czech", "uk": "Ukrainian", "el": "Greek", "he": "Hebrew", "id": "Indonesian",
    "vi": "Vietnamese", "th": "Thai", "ro": "Romanian", "hu": "Hungarian", "ca": "Catalan",
}


def _identifier(ctx: CheckContext):
    """py3langid's identifier over `LANGUAGE_NAMES`' languages with normalized probabilities, made once per run
    (its model ships in the wheel; accuracy on short texts: benchmarks/language_id.py)."""
    if "py3langid" not in ctx.cache:
        from py3langid.langid import MODEL_FILE, LanguageIdentifier

        identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
        identifier.set_languages(list(LANGUAGE_NAMES))  # the commonest languages: fewer look-alikes on short texts
        ctx.cache["py3langid"] = identifier
    return ctx.cache["py3langid"]


def prose(text: str) -> str:
    """The words of an output to identify its language: a JSON value's strings (keys are schema, not language)."""
    text = str(text)
    if text.lstrip()[:1] in "{[":
        try:
            return " ".join(_strings(json.loads(text)))
        except json.JSONDecodeError:
            pass
    return text


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _letters(text: str) -> int:
    return sum(c.isalpha() for c in text)


def detect_language(text: str, ctx: CheckContext) -> str | None:
    """The ISO 639-1 code of `text` when it has `MIN_LETTERS` letters and py3langid is sure (`MIN_LANG_PROB`)."""
    if _letters(text) < MIN_LETTERS:
        return None
    code, prob = _identifier(ctx).classify(text)
    return code if prob >= MIN_LANG_PROB else None


@register("language", description="the output is in the reference's language (the prompt's without one)")
def check_language(output: str, row: Mapping, ctx: CheckContext) -> tuple[bool | None, str]:
    reference, prompt = row.get("reference"), row.get("prompt")
    targets = []
    if isinstance(reference, str) and reference.lstrip()[:1] not in "{[":
        targets.append(("the reference", reference))
    if prompt:
        targets.append(("the prompt", str(prompt)[-2000:]))
    want, against, target = None, "", ""
    for label, text in targets:  # the reference's language, else (unsure or none) the prompt's
        want = detect_language(text, ctx)
        if want is not None:
            against, target = label, text
            break
    got = detect_language(prose(output), ctx) if want is not None else None
    if got is None:
        return None, ""
    if got == want:
        return True, ""
    name = LANGUAGE_NAMES.get(got, got)
    if against == "the prompt" and re.search(rf"\b{re.escape(name)}\b", target, re.IGNORECASE):
        return True, ""  # the prompt asks for that language ("answer in French", "translate into German")
    return False, f"language: wrong language ({name} where {against} is in {LANGUAGE_NAMES.get(want, want)})"
