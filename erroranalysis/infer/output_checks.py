"""Output checks for generation runs: a small registry of named checkers.

Each checker looks at one model output (and the row's reference, label, schema, regex or tools) and answers
pass, fail or "does not apply" (None), with a reason when it fails. `run_checks` applies the checks of every row
and adds, per checker, a `check_<name>` column (True, False or null) and a `check_<name>_reason` column; an
example passes when none of its checks fails, and `failure_reason` joins the reasons of the failing ones.

Reasons start with the checker's name and a short category, then details in parentheses, for example
`json: wrapped in a code fence` or `label: unparseable (no allowed label in the output)`, so they also serve as
error-type hints for clustering.

| name | needs | passes when |
| --- | --- | --- |
| exact | reference | the output equals the reference, ignoring surrounding whitespace |
| normalized | reference | equal after lower-casing, Unicode NFKC, dropping punctuation and articles, collapsing spaces |
| label | label | the label extracted from the output is the gold label (see `extract_label`) |
| json | - | the whole output (surrounding whitespace aside) is valid JSON; cut short by max_new_tokens: own reason |
| json_schema | schema | the output's JSON (also found inside a code fence or text) validates against the row's schema |
| regex | regex | the pattern is found in the output (`re.search`; anchor with ^ and $ for the whole output) |
| tool_call | tools | the output is a call {"name", "arguments"} to a declared tool, with valid arguments |

Bad check inputs (an unknown check name, a schema that is not a valid JSON Schema, a regex that does not compile,
a tools list that is not a list of signatures) are reported by `prepare_columns` as one line naming the file, the
line and the column, before anything runs.
"""

from __future__ import annotations

import json
import re
import string
import unicodedata
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from erroranalysis.core.errors import ParameterError

UNPARSEABLE = "unparseable"
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


def _reason(text: str) -> str:
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


def extract_label(output: str, labels: Sequence[str]) -> tuple[str | None, str]:
    """Map an output to one of `labels`, or None with why.

    In order: a JSON answer's "label" value (or a JSON string, or the one string value of a one-key object); the
    whole output; else the one allowed label that occurs in it as a whole word. Comparisons ignore case,
    punctuation and surrounding space. Two different labels in free text, or none, give None.
    """
    by_norm: dict[str, str] = {}
    for label in labels:
        by_norm.setdefault(normalize(label), label)
    value, how, _ = extract_json(output)
    candidate = None
    if how != "none":
        if isinstance(value, str):
            candidate = value
        elif isinstance(value, dict):
            keys = {str(k).casefold(): k for k in value}
            if "label" in keys:
                candidate = value[keys["label"]]
            elif len(value) == 1:
                candidate = next(iter(value.values()))
        if candidate is not None:
            if not isinstance(candidate, str):
                return None, f"the JSON label {candidate!r} is not a string"
            found = by_norm.get(normalize(candidate))
            return (found, "") if found is not None else (None, f"{candidate!r} is not an allowed label")
    found = by_norm.get(normalize(output))
    if found is not None:
        return found, ""
    text = normalize(output)
    hits = [label for norm, label in by_norm.items() if norm and re.search(rf"(?<!\w){re.escape(norm)}(?!\w)", text)]
    if len(hits) == 1:
        return hits[0], ""
    if hits:
        return None, f"several labels: {', '.join(hits[:4])}"
    return None, "no allowed label in the output"


def parse_tool_call(output: str) -> tuple[dict | None, str]:
    """A tool call {"name", "arguments"} from an output (also OpenAI's {"function": {...}}, a one-item list,
    {"tool_calls": [...]} and Hermes-style <tool_call>...</tool_call> tags); (None, why) otherwise."""
    text = str(output)
    tagged = re.search(r"<tool_call>(.*?)(?:</tool_call>|$)", text, re.DOTALL)
    if tagged:
        text = tagged.group(1)
    value, how, error = extract_json(text)
    if how == "none":
        return None, "no tool call found" + (f" ({error})" if error and error != "empty output" else "")
    if isinstance(value, dict) and isinstance(value.get("tool_calls"), list):
        value = value["tool_calls"]
    if isinstance(value, list):
        if len(value) != 1:
            return None, f"expected one tool call, found a list of {len(value)}"
        value = value[0]
    if isinstance(value, dict) and isinstance(value.get("function"), dict):
        value = value["function"]
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None, "no tool name (expected {\"name\": ..., \"arguments\": {...}})"
    arguments = value.get("arguments", value.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            return None, "arguments are not valid JSON"
    if not isinstance(arguments, dict):
        return None, "arguments are not a JSON object"
    return {"name": value["name"], "arguments": arguments}, ""


@register("exact", needs=("reference",), description="output equals the reference (surrounding whitespace aside)")
def check_exact(output: str, row: Mapping, ctx: CheckContext) -> tuple[bool | None, str]:
    reference = row.get("reference")
    if not _present(reference):
        return None, ""
    if str(output).strip() == str(reference).strip():
        return True, ""
    if normalize(output) == normalize(reference):
        return False, "exact: differs only in case, punctuation or spacing"
    return False, "exact: differs from the reference"


@register("normalized", needs=("reference",), description="output equals the reference after normalization")
def check_normalized(output: str, row: Mapping, ctx: CheckContext) -> tuple[bool | None, str]:
    reference = row.get("reference")
    if not _present(reference):
        return None, ""
    got, want = normalize(output), normalize(reference)
    if got == want:
        return True, ""
    if not got:
        return False, "normalized: empty output"
    if want and want in got:
        return False, "normalized: contains the reference plus extra text"
    return False, "normalized: differs from the reference"


@register("label", needs=("label",), description="the label extracted from the output is the gold label")
def check_label(output: str, row: Mapping, ctx: CheckContext) -> tuple[bool | None, str]:
    gold = row.get("label")
    if not _present(gold):
        return None, ""
    pred, why = extract_label(output, ctx.labels)
    if pred is None:
        return False, f"label: {UNPARSEABLE} ({why})"
    if pred != gold:
        return False, f"label: wrong label ({pred!r} for {gold!r})"
    return True, ""


@register("json", description="the whole output is valid JSON")
def check_json(output: str, row: Mapping, ctx: CheckContext) -> tuple[bool | None, str]:
    value, how, error = extract_json(output)
    if how == "strict":
        return True, ""
    if how == "fenced":
        return False, "json: wrapped in a code fence"
    if how == "embedded":
        return False, "json: extra text around the JSON"
    if error == "empty output":
        return False, "json: empty output"
    if row.get("stop_reason") == "length" and str(output).lstrip()[:1] in ("{", "["):
        return False, f"json: cut off at max_new_tokens ({error})"
    return False, f"json: not valid JSON ({error})"


@register("json_schema", needs=("schema",), description="the output's JSON validates against the row's schema")
def check_json_schema(output: str, row: Mapping, ctx: CheckContext) -> tuple[bool | None, str]:
    schema = row.get("schema")
    if schema is None:
        return None, ""
    value, how, _ = extract_json(output)
    if how == "none":
        return False, "json_schema: no JSON to validate"
    return _validate("json_schema", ctx.validator(schema), value)


def _validate(name: str, validator, value) -> tuple[bool, str]:
    from jsonschema.exceptions import best_match

    error = best_match(validator.iter_errors(value))
    if error is None:
        return True, ""
    at = "/".join(str(p) for p in error.absolute_path)
    kind = error.validator if isinstance(error.validator, str) else "invalid"
    return False, f"{name}: {kind} ({error.message}{' at ' + at if at else ''})"


@register("regex", needs=("regex",), description="the pattern is found in the output")
def check_regex(output: str, row: Mapping, ctx: CheckContext) -> tuple[bool | None, str]:
    pattern = row.get("regex")
    if pattern is None:
        return None, ""
    if pattern.search(str(output)):
        return True, ""
    return False, f"regex: no match ({pattern.pattern})"


@register("tool_call", needs=("tools",),
          description="a call to a declared tool with arguments that match its signature")
def check_tool_call(output: str, row: Mapping, ctx: CheckContext) -> tuple[bool | None, str]:
    tools = row.get("tools")
    if tools is None:
        return None, ""
    call, why = parse_tool_call(output)
    if call is None:
        return False, f"tool_call: {why}"
    declared = {t["name"]: t for t in tools}
    if call["name"] not in declared:
        return False, f"tool_call: unknown tool ({call['name']!r}; declared: {', '.join(declared)})"
    reference = row.get("reference")
    if _present(reference):
        expected, _ = parse_tool_call(reference)
        if expected is not None and expected["name"] != call["name"]:
            return False, f"tool_call: wrong tool ({call['name']!r} for {expected['name']!r})"
    parameters = declared[call["name"]].get("parameters")
    if parameters is None:
        return True, ""
    ok, reason = _validate("tool_call", ctx.validator(parameters), call["arguments"])
    return ok, reason.replace("tool_call: ", "tool_call: arguments ", 1) if not ok else ""


def _present(value) -> bool:
    return value is not None and not (isinstance(value, float) and np.isnan(value)) and str(value) != ""


def default_checks(available: Iterable[str]) -> list[str]:
    """The checks that apply when none are named: from the columns the eval set has."""
    available = set(available)
    checks = []
    if "label" in available:
        checks.append("label")
    if "schema" in available:
        checks += ["json", "json_schema"]
    if "regex" in available:
        checks.append("regex")
    if "tools" in available:
        checks.append("tool_call")
    if "score" in available:
        checks.append("judge")
    if not checks and "reference" in available:
        checks.append("normalized")
    return checks


def missing_inputs(checks: Iterable[str], available: Iterable[str]) -> list[tuple[str, str]]:
    """(check, field) pairs where a named check needs a column the eval set lacks."""
    available = set(available)
    return [(name, need) for name in checks for need in CHECKERS[name].needs if need not in available]


def run_checks(outputs: Sequence[str], rows: Sequence[Mapping[str, Any]], checks: Sequence[str] | None = None,
               *, labels: Sequence[str] = (), per_row_checks: Sequence[list[str] | None] | None = None,
               scoring=None) -> pd.DataFrame:
    """Apply the checks to every output.

    `rows[i]` holds the i-th example's inputs (reference, label, parsed schema, compiled regex, parsed tools) and
    optionally its `stop_reason`;
    `checks` is the default list and `per_row_checks[i]`, when not None, replaces it for that row; `scoring` holds
    the free-form scorers' thresholds (`scorers.ScorerParams`; their defaults without it). Returns one
    row per output: `pred` (the extracted label, or "unparseable"; None without labels), per used checker
    `check_<name>` (nullable bool) and `check_<name>_reason`, `passed` and `failure_reason`.
    """
    n = len(outputs)
    if len(rows) != n:
        raise ParameterError("rows", len(rows), f"one row per output ({n})")
    checks = list(checks or [])
    unknown = [c for c in checks if c not in CHECKERS]
    if unknown:
        raise ParameterError("checks", unknown[0], "one of " + ", ".join(CHECKERS))
    ctx = CheckContext(labels=list(labels), scoring=scoring)
    used = list(dict.fromkeys(checks + [c for r in (per_row_checks or []) if r for c in r]))
    used = [c for c in CHECKERS if c in used]  # registry order
    passed_cols = {c: np.full(n, None, dtype=object) for c in used}
    reason_cols = {c: np.full(n, None, dtype=object) for c in used}
    passed = np.ones(n, dtype=bool)
    failure = np.full(n, "", dtype=object)
    preds = np.full(n, None, dtype=object)
    for i in range(n):
        output = "" if outputs[i] is None else str(outputs[i])
        row = rows[i]
        if labels:
            pred, _ = extract_label(output, ctx.labels)
            preds[i] = pred if pred is not None else UNPARSEABLE
        names = per_row_checks[i] if per_row_checks is not None and per_row_checks[i] is not None else checks
        reasons = []
        for name in names:
            ok, why = CHECKERS[name].func(output, row, ctx)
            if ok is None:
                continue
            passed_cols[name][i] = bool(ok)
            reason_cols[name][i] = "" if ok else _reason(why)
            if not ok:
                reasons.append(_reason(why))
        if reasons:
            passed[i] = False
            failure[i] = "; ".join(reasons)
    out = pd.DataFrame({"pred": preds})
    for name in used:
        out[f"check_{name}"] = pd.array(passed_cols[name], dtype="boolean")
        out[f"check_{name}_reason"] = pd.array(reason_cols[name], dtype="string")
    out["passed"] = passed
    out["failure_reason"] = failure.astype(str)
    return out


def describe_checks() -> list[dict]:
    return [{"name": c.name, "needs": list(c.needs), "description": c.description} for c in CHECKERS.values()]


# The free-form scorers (contains, token_f1, rouge_l, numeric, judge) register themselves beside the checks above.
from erroranalysis.infer import scorers  # noqa: E402, F401
