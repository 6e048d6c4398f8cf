"""The `json_fields` check: an output's JSON against a JSON reference, field by field.

Both values are flattened to paths (`customer.name`, `items[0].qty`); a path only the reference has is missing, one
only the output has is extra, and a missing and an extra path that hold the same value, or whose names differ only
in case, separators or a few letters (`customer_name`, `customerName`, `client_name`), are one renamed field; a path
both have with other values is a wrong value. The reason leads with the gravest kind (renamed, missing, extra,
wrong value) and names every difference: `json_fields: renamed field (customer_name -> client, total: 12 for 15)`.
Strings compare after normalization (case, punctuation, articles), numbers within 1e-9, and "12" equals 12.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Mapping
from typing import Any

from erroranalysis.infer.check_registry import CheckContext, extract_json, normalize, register

MAX_LISTED = 4  # differences named in a reason
NAME_SIMILARITY = 0.75  # difflib ratio of two field names (separators and case aside) that makes a rename


def json_reference(reference: Any) -> Any:
    """The reference as a JSON object or array, or None when it is not one (text, a number, empty)."""
    if isinstance(reference, (dict, list)):
        return reference
    if not isinstance(reference, str) or reference.strip()[:1] not in ("{", "["):
        return None
    try:
        value = json.loads(reference)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, (dict, list)) else None


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """{path: leaf} of a JSON value; an empty object or list is a leaf."""
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(value, list) and value:
        out = {}
        for i, item in enumerate(value):
            out.update(flatten(item, f"{prefix}[{i}]"))
        return out
    return {prefix or "$": value}


def same_value(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b or (isinstance(a, str) and a.casefold() == str(b).casefold()) or \
            (isinstance(b, str) and b.casefold() == str(a).casefold())
    numbers = [_number(v) for v in (a, b)]
    if None not in numbers:
        return math.isclose(numbers[0], numbers[1], rel_tol=1e-9, abs_tol=1e-9)
    if isinstance(a, str) and isinstance(b, str):
        return normalize(a) == normalize(b)
    return a == b


def _number(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str) and re.fullmatch(r"\s*[-+]?\d+(?:\.\d+)?\s*", value):
        return float(value)
    return None


def _name(path: str) -> str:
    return re.sub(r"[^a-z0-9]", "", path.rsplit(".", 1)[-1].casefold())


def _similar_names(a: str, b: str) -> bool:
    x, y = _name(a), _name(b)
    return x == y or difflib.SequenceMatcher(None, x, y).ratio() >= NAME_SIMILARITY


def _parent(path: str) -> str:
    return path.rsplit(".", 1)[0] if "." in path else ""


def diff(reference: Any, output: Any) -> dict[str, list]:
    """{"renamed": [(ref path, out path)], "missing": [path], "extra": [path], "wrong": [(path, got, want)]}."""
    want, got = flatten(reference), flatten(output)
    missing = [p for p in want if p not in got]
    extra = [p for p in got if p not in want]
    renamed = []
    for m in list(missing):
        match = next((e for e in extra if _parent(e) == _parent(m) and same_value(got[e], want[m])), None) or \
            next((e for e in extra if _parent(e) == _parent(m) and _similar_names(m, e)), None)
        if match is not None:
            renamed.append((m, match))
            missing.remove(m)
            extra.remove(match)
    wrong = [(p, got[p], want[p]) for p in want if p in got and not same_value(got[p], want[p])]
    wrong += [(m, got[e], want[m]) for m, e in renamed if not same_value(got[e], want[m])]
    return {"renamed": renamed, "missing": missing, "extra": extra, "wrong": wrong}


def _show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else value
    return text if len(text) <= 30 else text[:27] + "..."


def describe(found: dict[str, list]) -> tuple[str, str] | None:
    """(the gravest kind, every difference in words), or None when there is none."""
    parts = [f"{a} -> {b}" for a, b in found["renamed"]]
    parts += [f"missing {p}" for p in found["missing"]] + [f"extra {p}" for p in found["extra"]]
    parts += [f"{p}: {_show(g)} for {_show(w)}" for p, g, w in found["wrong"]]
    if not parts:
        return None
    kind = ("renamed field" if found["renamed"] else "missing field" if found["missing"] else
            "extra field" if found["extra"] else "wrong value")
    more = len(parts) - MAX_LISTED
    return kind, ", ".join(parts[:MAX_LISTED]) + (f", {more} more" if more > 0 else "")


@register("json_fields", needs=("reference",),
          description="the output's JSON has the JSON reference's fields and values (no more, none renamed)")
def check_json_fields(output: str, row: Mapping, ctx: CheckContext) -> tuple[bool | None, str]:
    reference = json_reference(row.get("reference"))
    if reference is None:
        return None, ""
    value, how, _ = extract_json(output)
    if how == "none":
        return False, "json_fields: no JSON to compare"
    found = describe(diff(reference, value))
    if found is None:
        return True, ""
    kind, details = found
    return False, f"json_fields: {kind} ({details})"
