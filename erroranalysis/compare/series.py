"""The report's shapes: the ablation table over candidates, its cells, and the JSON form."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from erroranalysis.compare.stats import finite
from erroranalysis.core.files import jsonable

REPORT_FILES = ("compare.json", "compare.md", "compare_examples.parquet")


@dataclass
class Report:
    doc: dict                 # the JSON report
    examples: Any             # one row per (candidate, example): status, predictions, error types, clusters, text


def series(doc: dict) -> dict:
    """The ablation table: one row per statistic (overall, per class F1, failures per error type, fixed/broken),
    one value per run (the baseline first), with the change against the baseline and its interval."""
    comps = doc["comparisons"]
    run_names = [r["name"] for r in doc["runs"]]
    rows = []

    def add(section, name, metric, base, values, deltas=None, cis=None, sig=None, unit="rate"):
        rows.append({"section": section, "name": name, "metric": metric, "unit": unit, "values": [base] + values,
                     "deltas": [None] + (deltas if deltas is not None else [None] * len(values)),
                     "ci": [None] + (cis if cis is not None else [None] * len(values)),
                     "significant": [None] + (sig if sig is not None else [None] * len(values))})

    for metric in ("accuracy", "macro_f1", "weighted_f1"):
        cells = [c["overall"][metric] for c in comps]
        add("overall", metric.replace("_", " "), metric, cells[0]["base"], [x["candidate"] for x in cells],
            [x["delta"] for x in cells], [x["ci"] for x in cells], [x["significant"] for x in cells])
    for i, label in enumerate(comps[0]["labels"]):
        cells = [c["per_class"][i]["f1"] for c in comps]
        add("class", label, "f1", cells[0]["base"], [x["candidate"] for x in cells], [x["delta"] for x in cells],
            [x["ci"] for x in cells], [x["significant"] for x in cells])
    if all(c["error_types"] is not None for c in comps):
        names: list[str] = []
        for c in comps:
            for r in c["error_types"]:
                if r["name"] not in names:
                    names.append(r["name"])
        for name in names:
            found = [next((r for r in c["error_types"] if r["name"] == name), None) for c in comps]
            base = next((r["base"] for r in found if r is not None), 0)
            after = [None if r is not None and r["candidate"] is None else
                     (r["candidate"] + r["candidate_suggested"]) if r else 0 for r in found]
            add("error type", name, "failures", base, after, [None if a is None else a - base for a in after],
                unit="count")
    add("examples", "fixed", "fixed", None, [c["counts"]["fixed"] for c in comps], unit="count")
    add("examples", "broken", "broken", None, [c["counts"]["broken"] for c in comps], unit="count")
    add("examples", "McNemar p", "mcnemar_p", None, [finite(c["mcnemar"]["p_value"]) for c in comps], unit="p")
    return {"runs": run_names, "baseline": run_names[0], "rows": rows}


def series_frame(doc: dict):
    """The ablation table as a DataFrame: section, name, then one column per run (the baseline's title marked
    "(baseline)"), each candidate cell "value (±delta)"."""
    import pandas as pd

    s = doc["series"]
    titles = [f"{s['runs'][0]} (baseline)"] + s["runs"][1:]
    records = []
    for row in s["rows"]:
        rec = {"section": row["section"], "name": row["name"]}
        for j, title in enumerate(titles):
            rec[title] = format_cell(row, j)
        records.append(rec)
    return pd.DataFrame(records, columns=["section", "name"] + titles)


def format_cell(row: dict, j: int) -> str:
    value, delta, ci = row["values"][j], row["deltas"][j], row["ci"][j]
    unit = row["unit"]
    if value is None:
        return "–"
    if unit == "rate":
        text = f"{value:.1%}"
        if delta is not None:
            text += f" ({delta * 100:+.1f}"
            if ci is not None and ci[0] is not None:
                text += f" [{ci[0] * 100:+.1f}, {ci[1] * 100:+.1f}]"
            text += ")" + (" *" if row["significant"][j] else "")
        return text
    if unit == "p":
        return f"{value:.3g}"
    text = f"{int(value):,}"
    if delta is not None:
        text += f" ({delta:+d})"
    return text


def to_json(doc: dict) -> str:
    return json.dumps(jsonable(doc), indent=2, ensure_ascii=False, allow_nan=False) + "\n"
