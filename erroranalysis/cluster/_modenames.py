"""Names and summaries of a generation run's error types: the failure first, the topic second.

`cut off at max_tokens inside the JSON (bug, crash prompts)`, and as a sentence `Cut off at max_tokens inside
the JSON: 45 outputs, mostly bug, crash prompts; 18% of the failures; also json_fields: no JSON to compare (100%).`
The failure is the members' commonest mode (`_modes.mode_of`), in words; the topic the keywords of the members'
prompts (c-TF-IDF against the other failures' and the passing outputs' prompts).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

import numpy as np

from erroranalysis.cluster._modes import EMPTY, categories, mode_of

PHRASES = {
    "refusal: declines to answer": "refuses to answer",
    "repetition: a loop": "repetition loop",
    EMPTY: "empty output",
    "language: wrong language": "answers in the wrong language",
    "length: cut off at max_tokens": "cut off at max_tokens",
    "shape: JSON cut short": "JSON cut short",
    "shape: text before the JSON": "text before the JSON",
    "shape: text after the JSON": "text after the JSON",
    "shape: text around the JSON": "text around the JSON",
    "shape: wrapped in a code fence": "JSON wrapped in a code fence",
    "shape: no JSON in the output": "no JSON in the output",
    "shape: not valid JSON": "not valid JSON",
    "json_fields: renamed field": "renamed JSON fields",
    "json_fields: missing field": "missing JSON fields",
    "json_fields: extra field": "extra JSON fields",
    "json_fields: wrong value": "wrong values in the JSON",
    "normalized: differs from the reference": "differs from the reference",
    "normalized: contains the reference plus extra text": "the reference plus extra text",
}
MOSTLY = 0.5  # share of a cluster's failures that makes a co-occurring reason or a language worth saying


def phrase(mode: str) -> str:
    return " + ".join(PHRASES.get(part, part) for part in mode.split(" + "))


def _language(reasons: Sequence[str]) -> str:
    """The commonest `French where the prompt is in English` detail of the language reasons, or ''."""
    found = Counter(m.group(1) for r in reasons for m in [re.search(r"language: wrong language \(([^)]*)\)", r)] if m)
    if not found:
        return ""
    detail, count = found.most_common(1)[0]
    return detail if count >= MOSTLY * len(reasons) else ""


def _topic(prompts: Sequence[str], keywords: Sequence[str]) -> str:
    """The keywords (up to two) found in at least half the members' prompts: a topic the cluster is mostly
    about; '' when the failure spreads over topics."""
    lowered = [str(p).lower() for p in prompts]
    held = [k for k in keywords if lowered and sum(k in p for p in lowered) >= MOSTLY * len(lowered)]
    return ", ".join(held[:2])


def describe_mode(reasons: Sequence[str], keywords: Sequence[str], *, share: float,
                  prompts: Sequence[str] = ()) -> dict:
    """{"mode", "name", "summary", "modal"}: the members' commonest mode, the cluster's name and sentence, and
    which members have that mode (exemplars show the failure)."""
    cats = [categories(r) for r in reasons]
    modes = [mode_of(c) for c in cats]
    mode = Counter(modes).most_common(1)[0][0] if modes else "no reason given"
    words = phrase(mode)
    also = Counter(c for cs in cats for c in cs if c not in mode.split(" + "))
    if mode == "length: cut off at max_tokens" and also.get("shape: JSON cut short", 0) >= MOSTLY * len(cats):
        words = "cut off at max_tokens inside the JSON"
    elif mode == "language: wrong language" and _language(reasons):
        words = f"answers in {_language(reasons).split(' where ')[0]} ({_language(reasons).split(' where ')[1]})"
    topic = _topic(prompts, keywords)
    name = f"{words} ({topic} prompts)" if topic else words
    n = len(reasons)
    sentence = f"{words[0].upper() + words[1:]}: {n} output{'s' if n != 1 else ''}"
    sentence += f", mostly {topic} prompts" if topic else " across prompt topics"
    parts = [sentence, f"{share:.0%} of the failures" if share >= 0.01 else "under 1% of the failures"]
    common = [f"{c} ({k / n:.0%})" for c, k in also.most_common(3) if k >= MOSTLY * n]
    if common:
        parts.append("also " + ", ".join(common))
    return {"mode": mode, "name": name, "summary": "; ".join(parts) + ".",
            "modal": np.array([m == mode for m in modes], dtype=bool)}
