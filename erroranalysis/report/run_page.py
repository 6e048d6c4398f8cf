"""The report of one run as one HTML page, from the document `erroranalysis.stages.run_document` builds (pure).

Sections, always in this order and always present (one that has nothing says why): overview, per-class,
confusion, calibration, output checks (generation runs), clusters, slices, checks, taxonomy.
"""

from __future__ import annotations

from erroranalysis.metrics.averages import average_rows
from erroranalysis.metrics.display import rate
from erroranalysis.report import figures
from erroranalysis.report.page import cut, esc, figure, kpis, note, num, page, pct, table

SECTIONS = ("overview", "per-class", "confusion", "calibration", "clusters", "slices", "checks", "taxonomy")
TEXT_CHARS = 400  # characters of an exemplar's text shown


def render_run(doc: dict) -> str:
    """The page: a section per part of the run (see SECTIONS; `output-checks` too for a generation run)."""
    metrics = doc["metrics"]
    parts = [("overview", "Overview", overview(doc)),
             ("per-class", "Per class", per_class(metrics, doc["run"]["task"])),
             ("confusion", "Confusion matrix", confusion(metrics)),
             ("calibration", "Calibration", calibration(metrics))]
    if metrics.get("output_checks"):
        parts.append(("output-checks", "Output checks", output_checks(metrics["output_checks"])))
    parts += [("clusters", "Error clusters", clusters(doc["clusters"])),
              ("slices", "Error slices", slices(doc["slices"])),
              ("checks", "Data checks", checks(doc["checks"])),
              ("taxonomy", "Labeled taxonomy", taxonomy(doc["taxonomy"]))]
    run = doc["run"]
    subtitle = f"{run['task']} run · {run['n']:,} examples · model {run.get('model') or '–'} · data {run.get('data')}"
    return page(f"erroranalysis report: {run['name']}", subtitle, parts,
                footer=f"erroranalysis {doc['tool_version']} · generated {doc['generated']} · {run['path']}")


def overview(doc: dict) -> str:
    o = doc["metrics"]["overall"]
    items = [("examples", f"{o['n']:,}"), ("failures", f"{o['n_failures']:,}"), ("accuracy", pct(o.get("accuracy"))),
             ("macro F1", num(o.get("macro_f1"))), ("weighted F1", num(o.get("weighted_f1")))]
    if doc["run"]["task"] == "token-classification":  # seqeval's entity scores head the page, as the app's Overview
        items = [("sentences", f"{o['n']:,}"), ("entity micro F1", num(o.get("micro_f1"))),
                 ("entity macro F1", num(o.get("macro_f1"))), ("token accuracy", pct(o.get("token_accuracy"))),
                 ("sentences with errors", f"{o['n_failures']:,}"), ("sentence accuracy", pct(o.get("accuracy")))]
    if o.get("ece") is not None:
        items += [("ECE", num(o["ece"])), ("Brier", num(o["brier"]))]
    checks = doc["metrics"].get("output_checks")
    if checks:
        items.insert(2, ("pass rate", pct(checks.get("pass_rate"))))
    ci = o.get("accuracy_ci")
    text = note(f"Accuracy 95% bootstrap interval: [{ci[0]:.3f}, {ci[1]:.3f}].") if ci else ""
    stages = table([{"stage": k, **v} for k, v in doc["run"]["stages"].items()],
                   [("stage", "stage", None), ("status", "status", None), ("seconds", "seconds", lambda v: num(v, ".1f"))])
    return kpis(items) + text + "<h3>Stages</h3>" + stages


def per_class(metrics: dict, task: str = "classification") -> str:
    """The per-class table, worst F1 first, ending with the micro, macro and weighted averages (and samples for a
    multi-label run) as classification_report and seqeval print them."""
    rows = metrics.get("per_class") or []
    if not rows:
        return note("No per-class metrics in this run.")
    ci = lambda r: f"[{r['f1_ci'][0]:.3f}, {r['f1_ci'][1]:.3f}]" if r.get("f1_ci") else "–"  # noqa: E731
    shown = sorted(rows, key=lambda r: r["f1"]) + average_rows(task, metrics)
    body = table(shown, [
        ("label", "class", None), ("precision", "precision", rate), ("recall", "recall", rate), ("f1", "F1", rate),
        (ci, "F1 95% CI", esc), ("support", "support", lambda v: f"{v:,}"),
        (lambda r: r.get("predicted"), "predicted", lambda v: num(v, ","))])
    return figure(figures.per_class_f1(rows)) + body


def confusion(metrics: dict) -> str:
    doc = metrics.get("confusion")
    if not doc or not doc.get("labels"):
        return note("No confusion matrix in this run.")
    top = metrics.get("top_confusions") or []
    listing = table(top, [("label", "true", None), ("pred", "predicted", None), ("count", "count", num_int),
                          ("share_of_failures", "share of failures", pct)]) if top else ""
    return figure(figures.confusion(doc)) + ("<h3>Most frequent confusions</h3>" + listing if listing else "")


def num_int(value) -> str:
    return num(value, ",")


def calibration(metrics: dict) -> str:
    cal = metrics.get("calibration")
    if not cal:
        return note("No calibration: the run has no class probabilities (an analyze run without prob_<label> "
                    "columns, or a generation run).")
    return kpis([("ECE", num(cal["ece"])), ("Brier", num(cal["brier"])), ("bins", str(cal["n_bins"]))]) + \
        figure(figures.reliability(cal))


def output_checks(checks: dict) -> str:
    per_check = table(checks.get("per_check") or [], [("check", "check", None), ("applied", "applied", num_int),
                                                      ("passed", "passed", num_int), ("pass_rate", "pass rate", pct)])
    reasons = table(checks.get("failure_reasons") or [], [
        ("reason", "failure reason", None), ("count", "failures", num_int),
        ("share_of_failures", "share of failures", pct)])
    return (kpis([("pass rate", pct(checks.get("pass_rate"))), ("failed", f"{checks.get('n_failed', 0):,}"),
                  ("unparseable", num_int(checks.get("unparseable")))])
            + "<h3>Per check</h3>" + per_check + "<h3>Why outputs fail</h3>" + reasons)


def _exemplar(ex: dict) -> str:
    return (f"<div><b>{esc(ex['example_id'])}</b> · {esc(ex.get('label'))} → {esc(ex.get('pred'))}"
            f"<div class=text>{esc(cut(ex.get('text'), TEXT_CHARS))}</div></div>")


def clusters(part: dict) -> str:
    if not part["available"]:
        return note(f"No clusters: {part['reason']}.")
    rows = part["rows"]
    if not rows:
        return note("The cluster stage found no error clusters.")
    cards = []
    for r in rows:
        facts = [f"{r['size']:,} failures", esc(r.get("kind") or "")]
        if r.get("keywords"):
            facts.append("keywords: " + esc(", ".join(map(str, r["keywords"][:8]))))
        exemplars = "".join(_exemplar(ex) for ex in r["exemplars"])
        cards.append(f'<div class="card"><h3>#{esc(r["cluster_id"])} {esc(r["name"])}</h3>'
                     f'<p>{" · ".join(facts)}</p>{exemplars}</div>')
    shown = note(f"The {len(rows)} largest of {part['n']} clusters.") if part["n"] > len(rows) else ""
    return figure(figures.cluster_sizes(rows)) + shown + '<div class="cards">' + "".join(cards) + "</div>"


def slices(part: dict) -> str:
    if not part["available"]:
        return note(f"No error slices: {part['reason']}.")
    if not part["rows"]:
        return note("The slices stage found no slice whose error rate stands out.")
    shown = note(f"The {len(part['rows'])} best of {part['n']} slices.") if part["n"] > len(part["rows"]) else ""
    return shown + table(part["rows"], [
        ("slice_id", "#", num_int), ("description", "slice", None), ("support", "examples", num_int),
        ("failures", "failures", num_int), ("error_rate", "error rate", pct), ("lift", "lift", lambda v: num(v, ".2f")),
        ("p_value", "p-value", lambda v: num(v, ".2g"))])


def checks(part: dict) -> str:
    if not part["available"]:
        return note(f"No data checks: {part['reason']}.")
    findings = part["findings"]
    body = table(findings, [("severity", "severity", None), ("check", "check", None), ("message", "finding", None),
                            ("advice", "advice", None)]) if findings else note("The data checks found nothing.")
    issues = part.get("label_issues") or []
    if issues:
        body += "<h3>Most likely label issues</h3>" + table(issues, [
            ("example_id", "example", None), ("label", "label", None), ("suggested_label", "suggested", None),
            ("score", "score", num)])
    return body


def taxonomy(part: dict) -> str:
    if not part["available"]:
        return note(f"No labeled taxonomy: {part['reason']}.")
    s = part["summary"]
    head = kpis([("error types", str(s["n_error_types"])), ("labeled failures", f"{s['n_labeled_failures']:,}"),
                 ("share labeled", pct(s["share_of_failures_labeled"]))])
    cards = []
    for t in part["error_types"]:
        exemplars = "".join(_exemplar(ex) for ex in t.get("exemplars") or [])
        cards.append(f'<div class="card"><h3>{esc(t["name"])}</h3><p>{esc(t.get("definition") or "")}</p>'
                     f'<p>severity {esc(t.get("severity"))} · {t["failures"]:,} failures '
                     f'({pct(t.get("share_of_failures"))} of all)</p>{exemplars}</div>')
    return head + '<div class="cards">' + "".join(cards) + "</div>"
