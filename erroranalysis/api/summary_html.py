"""The HTML a notebook shows for a run or a comparison (`_repr_html_`): headline metrics, the per-class table, the
confusion matrix and the top clusters; small and without scripts (the full page is `Run.report`)."""

from __future__ import annotations

from erroranalysis.report import compare_markdown as compare_report
from erroranalysis.report import esc, table

TOP_CLUSTERS = 8
MAX_CLASSES = 20  # a larger confusion matrix is left to the report


def _num(value, fmt: str = ".3f") -> str:
    return "–" if not isinstance(value, (int, float)) or value != value else format(value, fmt)


def run_summary(name: str, task: str, metrics: dict, clusters, stages) -> str:
    o = metrics["overall"]
    head = (f"<h3 style='margin:4px 0'>erroranalysis run <code>{esc(name)}</code> ({esc(task)})</h3>"
            f"<p>{o['n']:,} examples · {o['n_failures']:,} failures · accuracy {_num(o.get('accuracy'))} · "
            f"macro F1 {_num(o.get('macro_f1'))}"
            + (f" · pass rate {_num((metrics.get('output_checks') or {}).get('pass_rate'))}"
               if metrics.get("output_checks") else "") + "</p>")
    per_class = table(sorted(metrics.get("per_class") or [], key=lambda r: r["f1"]), [
        ("label", "class", None), ("precision", "precision", _num), ("recall", "recall", _num), ("f1", "F1", _num),
        ("support", "support", lambda v: f"{v:,}")])
    body = head + "<b>Per class</b>" + per_class + _confusion(metrics.get("confusion"))
    if len(clusters):
        rows = clusters.head(TOP_CLUSTERS).to_dict("records")
        body += f"<b>Top clusters</b> (of {len(clusters)})" + table(rows, [
            ("cluster_id", "#", str), ("size", "failures", lambda v: f"{v:,}"), ("name", "name", None)])
    problems = [f"{esc(stage)}: {esc(p)}" for stage, p in stages["problem"].items() if p]
    if problems:
        body += "<p style='color:#b45309'>" + "<br>".join(problems) + "</p>"
    return f"<div class='erroranalysis-run'>{body}</div>"


def _confusion(doc: dict | None) -> str:
    if not doc or not doc["labels"] or len(doc["labels"]) > MAX_CLASSES:
        return ""
    labels = doc["labels"]
    head = "<tr><th>true \\ predicted</th>" + "".join(f"<th>{esc(c)}</th>" for c in labels) + "</tr>"
    rows = "".join(f"<tr><th>{esc(t)}</th>" + "".join(
        f"<td style='text-align:right;{'font-weight:bold' if i == j else ('color:#b91c1c' if v else '')}'>{v}</td>"
        for j, v in enumerate(row)) + "</tr>" for i, (t, row) in enumerate(zip(labels, doc["matrix"])))
    return f"<b>Confusion</b><table>{head}{rows}</table>"


def compare_summary(doc: dict) -> str:
    parts = [f"<h3 style='margin:4px 0'>erroranalysis comparison: <code>{esc(doc['baseline'])}</code> (baseline)</h3>"]
    for comp in doc["comparisons"]:
        parts.append(f"<p><b>{esc(comp['candidate'])}</b>: {esc(compare_report.headline(comp))}</p>")
        rows = sorted(comp["per_class"], key=lambda r: r["f1"]["delta"] or 0)
        parts.append(table(rows, [("label", "class", None), (lambda r: r["f1"]["base"], "F1 baseline", _num),
                                  (lambda r: r["f1"]["candidate"], "F1 candidate", _num),
                                  (lambda r: compare_report.pts(r["f1"]["delta"]) + (" *" if r["f1"]["significant"]
                                                                                      else ""), "delta", esc)]))
    return "<div class='erroranalysis-compare'>" + "".join(parts) + "</div>"
