"""Scorers for free-form answers, beside the format checks: registered as output checks (`output_checks.register`),
so each names itself in `failure_reason` and gets its own `check_<name>` column.

| name | needs | passes when |
| --- | --- | --- |
| contains | reference | the normalized reference occurs in the normalized output (as whole words) |
| token_f1 | reference | SQuAD's token F1 (normalized tokens, bag overlap) reaches `--f1-threshold` |
| rouge_l | reference | ROUGE-L F-measure (the `rouge-score` package) reaches `--rouge-threshold` |
| numeric | reference | the last number in the output equals the reference's last number within `--numeric-tolerance` |
| judge | score | your own judge's score (a `score` or `pass` column) reaches `--pass-threshold` |

`exact` and `normalized` are in `output_checks`. A reference cell holding a JSON list of strings is several
references: these scorers take the best of them (SQuAD's rule).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Mapping

from erroranalysis.core.errors import UserError
from erroranalysis.core.params import Float, Params, param
from erroranalysis.infer.output_checks import CheckContext, normalize, register

PANEL = "Output checks"


@dataclass(frozen=True)
class ScorerParams(Params):
    """When the free-form scorers pass (token_f1, rouge_l, numeric)."""

    f1_threshold: float = param(0.5, Float(0, 1), "The token_f1 check passes at this SQuAD token F1 or above.",
                                panel=PANEL)
    rouge_threshold: float = param(0.5, Float(0, 1), "The rouge_l check passes at this ROUGE-L F-measure or above.",
                                   panel=PANEL)
    numeric_tolerance: float = param(1e-6, Float(0), "The numeric check's tolerance, absolute and relative "
                                     "(math.isclose).", panel=PANEL)


def _scoring(ctx: CheckContext) -> ScorerParams:
    return ctx.scoring if isinstance(ctx.scoring, ScorerParams) else ScorerParams()


def references(value: Any) -> list[str]:
    """The reference answers of a cell: one string, or a JSON list of strings (several acceptable answers)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return []
    text = str(value)
    if text.startswith("["):
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError:
            return [text]
        if isinstance(parsed, list) and parsed and all(isinstance(v, str) for v in parsed):
            return parsed
    return [text] if text != "" else []


def token_f1(output: str, reference: str) -> float:
    """SQuAD v1.1's F1: the normalized answers' tokens as bags; 1.0 when both are empty, 0.0 when one is."""
    got, want = normalize(output).split(), normalize(reference).split()
    if not got or not want:
        return float(got == want)
    common = sum((Counter(got) & Counter(want)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(got), common / len(want)
    return 2 * precision * recall / (precision + recall)


_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|[-+]?\.\d+")


def last_number(text: str) -> float | None:
    """The last number written in `text` (thousands separators allowed: "1,234.5"); None when there is none."""
    found = _NUMBER.findall(str(text))
    return float(found[-1].replace(",", "")) if found else None


def _best(output: str, row: Mapping, score) -> tuple[float, str] | None:
    refs = references(row.get("reference"))
    if not refs:
        return None
    return max(((score(output, r), r) for r in refs), key=lambda pair: pair[0])


@register("contains", needs=("reference",), description="the normalized reference occurs in the output")
def check_contains(output: str, row: Mapping, ctx: CheckContext) -> tuple[bool | None, str]:
    refs = [normalize(r) for r in references(row.get("reference"))]
    if not refs:
        return None, ""
    text = f" {normalize(output)} "
    if any(r and f" {r} " in text for r in refs):
        return True, ""
    return False, "contains: reference not in the output" if text.strip() else "contains: empty output"


@register("token_f1", needs=("reference",), description="SQuAD token F1 with the reference reaches --f1-threshold")
def check_token_f1(output: str, row: Mapping, ctx: CheckContext) -> tuple[bool | None, str]:
    return _overlap("token_f1", "F1", _best(output, row, token_f1), _scoring(ctx).f1_threshold)


def _overlap(name: str, measure: str, best: tuple[float, str] | None, threshold: float) -> tuple[bool | None, str]:
    """An overlap scorer's verdict: pass at the threshold, else the score it reached."""
    if best is None:
        return None, ""
    if best[0] >= threshold:
        return True, ""
    return False, f"{name}: low overlap ({measure} {best[0]:.2f} < {threshold:g})"


def rouge_scorer(ctx: CheckContext):
    """rouge-score's ROUGE-L scorer, made once per run."""
    if "rouge_l" not in ctx.cache:
        from rouge_score import rouge_scorer as rs

        ctx.cache["rouge_l"] = rs.RougeScorer(["rougeL"])
    return ctx.cache["rouge_l"]


@register("rouge_l", needs=("reference",), description="ROUGE-L F-measure with the reference reaches "
                                                       "--rouge-threshold")
def check_rouge_l(output: str, row: Mapping, ctx: CheckContext) -> tuple[bool | None, str]:
    scorer = rouge_scorer(ctx)
    best = _best(output, row, lambda out, ref: scorer.score(ref, out)["rougeL"].fmeasure)
    return _overlap("rouge_l", "ROUGE-L", best, _scoring(ctx).rouge_threshold)


@register("numeric", needs=("reference",), description="the output's last number equals the reference's")
def check_numeric(output: str, row: Mapping, ctx: CheckContext) -> tuple[bool | None, str]:
    wanted = [n for n in (last_number(r) for r in references(row.get("reference"))) if n is not None]
    if not wanted:
        return None, ""  # a reference without a number: the check does not apply
    got = last_number(output)
    if got is None:
        return False, "numeric: no number in the output"
    tol = _scoring(ctx).numeric_tolerance
    if any(math.isclose(got, w, rel_tol=tol, abs_tol=tol) for w in wanted):
        return True, ""
    return False, f"numeric: wrong number ({got:g} for {wanted[0]:g})"


@register("judge", needs=("score",), description="your own judge's score reaches --pass-threshold")
def check_judge(output: str, row: Mapping, ctx: CheckContext) -> tuple[bool | None, str]:
    score = row.get("score")
    if score is None or (isinstance(score, float) and math.isnan(score)):
        return None, ""
    threshold = row.get("pass_threshold", 0.5)
    if float(score) >= threshold:
        return True, ""
    return False, f"judge: below the pass threshold ({row.get('judge', 'score')} {float(score):g} < {threshold:g})"


def require_packages(checks) -> None:
    """Refuse, before anything runs, a scorer whose package is not installed (one line with the install command)."""
    if "rouge_l" in checks:
        try:
            import rouge_score  # noqa: F401
        except ImportError:
            raise UserError("the rouge_l check needs rouge-score: pip install 'erroranalysis-ml[llm]' (or pip "
                            "install rouge-score).") from None
