"""The report of one run as one HTML page, from the document `erroranalysis.stages.run_document` builds (pure).

Sections, always in this order and always present (one that has nothing says why): overview, per-class,
confusion, calibration, clusters, slices, checks, taxonomy. A generation run leads with its output checks and
failure modes instead (GENERATION_SECTIONS), with per-class and confusion only when its prompts had a label column.
"""

from __future__ import annotations

from erroranalysis.metrics.averages import average_rows
from erroranalysis.metrics.display import output_length, rate
from erroranalysis.report import figures
from erroranalysis.report.page import cut, esc, figure, kpis, note, num, page, pct, table

SECTIONS = ("overview", "per-class", "confusion", "calibration", "clusters", "slices", "checks", "taxonomy")
GENERATION_SECTIONS = ("overview", "output-checks", "clusters", "slices", "checks", "taxonomy")
TEXT_CHARS = 400  # characters of an exemplar's text shown


def render_run(doc: dict) -> str:
    """The page: a section per part of the run (see SECTIONS; `output-checks` too for a generation run)."""
    metrics = doc["metrics"]
    generation = metrics.get("output_checks")
    task = doc["run"]["task"]
    if generation:  # a generation run: its checks and failure modes first; classes only with a label column
        parts = [("overview", "Overview", generation_overview(doc)),
                 ("output-checks", "Output checks and failure modes", output_checks(generation))]
        if generation.get("label_column"):
            parts += [("per-class", "Per class (the label extracted from the output)", per_class(metrics, task)),
                      ("confusion", "Confusion matrix", confusion(metrics))]
    else:
        parts = [("overview", "Overview", overview(doc)),
                 ("per-class", "Per class", per_class(metrics, task)),
                 ("confusion", "Confusion matrix", confusion(metrics)),
                 ("calibration", "Calibration", calibration(metrics))]
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


def generation_overview(doc: dict) -> str:
    checks = doc["metrics"]["output_checks"]
    loss = checks.get("loss") or {}
    items = [("examples", f"{checks['n']:,}"), ("passed every check", pct(checks.get("pass_rate"))),
             ("failing outputs", f"{checks['n_failed']:,}"), ("checks applied", str(len(checks.get("per_check") or [])))]
    if (loss.get("reference_loss") or {}).get("mean") is not None:
        items.append(("low loss but failing", num_int(loss.get("low_loss_failures"))))
    filters = len({g["group"].get("filter") for g in checks.get("per_group") or [] if "filter" in g["group"]})
    text = note(f"The rows pool {filters} filters (each document once per filter): read the pass rates per filter "
                "under Output checks.") if filters > 1 else ""
    stages = table([{"stage": k, **v} for k, v in doc["run"]["stages"].items()],
                   [("stage", "stage", None), ("status", "status", None), ("seconds", "seconds", lambda v: num(v, ".1f"))])
    return kpis(items) + text + "<h3>Stages</h3>" + stages


def output_checks(checks: dict) -> str:
    """Each check's pass rate, per task or filter, the failure modes with an exemplar, stop reasons and lengths
    against the limit, loss beside behaviour."""
    per_check = table(checks.get("per_check") or [], [("check", "check", None), ("applied", "applied", num_int),
                                                      ("passed", "passed", num_int), ("pass_rate", "pass rate", pct)])
    body = "<h3>Per check</h3>" + per_check + _groups(checks)
    reasons = table(checks.get("failure_reasons") or [], [
        ("reason", "failure reason", None), ("count", "failures", num_int),
        ("share_of_failures", "share of failures", pct),
        (lambda r: r.get("exemplar") or {}, "exemplar", _exemplar_cell)])
    body += "<h3>Failure modes</h3>" + reasons
    stops = checks.get("per_stop_reason") or []
    if stops:
        body += "<h3>Stop reasons and output length</h3>" + table(stops, [
            ("stop_reason", "stop reason", None), ("n", "outputs", num_int), ("pass_rate", "pass rate", pct),
            ("mean_output_tokens", "mean length", lambda v: num(v, ".3g"))])
    length = checks.get("output_length")
    if length and length.get("mean") is not None:
        sentence = output_length(length)
        body += note(esc(sentence[0].upper() + sentence[1:] + "."))
    return body + _loss(checks.get("loss") or {})


def _groups(checks: dict) -> str:
    rows, columns = checks.get("per_group") or [], checks.get("group_columns") or []
    if not rows:
        return ""
    names = list(dict.fromkeys(n for r in rows for n in r["checks"]))
    cells = [(lambda r, c=c: r["group"][c], c, None) for c in columns]
    cells += [("n", "n", num_int), ("n_passed", "passed", num_int), ("pass_rate", "pass rate", pct)]
    cells += [(lambda r, n=n: r["checks"].get(n), n, pct) for n in names]
    return f"<h3>Per {esc(' and '.join(columns))}</h3>" + table(rows, cells)


def _exemplar_cell(ex: dict) -> str:
    if not ex:
        return "–"
    return f"<b>{esc(ex.get('example_id'))}</b><div class=text>{esc(cut(ex.get('output'), TEXT_CHARS))}</div>"


def _loss(loss: dict) -> str:
    rows = [{"loss": column, **loss[column]} for column in ("reference_loss", "output_loss")
            if (loss.get(column) or {}).get("mean") is not None]
    if not rows:
        return ""
    return "<h3>Loss beside behaviour</h3>" + table(rows, [
        ("loss", "loss", None), ("mean", "mean", lambda v: num(v, ".3g")),
        ("mean_passed", "passing", lambda v: num(v, ".3g")), ("mean_failed", "failing", lambda v: num(v, ".3g"))]) + \
        note(f"{loss.get('low_loss_failures', 0):,} failing outputs have a reference loss at most the passing ones' "
             "median: the model finds the right answer likely, yet what it wrote fails a check.")


def _exemplar(ex: dict) -> str:
    if "output" in ex:  # a generation exemplar: the output and why it fails; the prompt folded
        return (f"<div><b>{esc(ex['example_id'])}</b> · {esc(ex.get('failure_reason'))}"
                f"<div class=text>{esc(cut(ex.get('output'), TEXT_CHARS))}</div>"
                f"<details><summary>prompt</summary><div class=text>{esc(cut(ex.get('prompt'), TEXT_CHARS))}</div>"
                "</details></div>")
    return (f"<div><b>{esc(ex['example_id'])}</b> · {esc(ex.get('label'))} → {esc(ex.get('pred'))}"
            f"<div class=text>{esc(cut(ex.get('text'), TEXT_CHARS))}</div></div>")


def clusters(part: dict) -> str:
    if not part["available"]:
        return note(f"No clusters: {part['reason']}.")
    rows = part["rows"]
    if not rows:
        return note(f"No error clusters: {part.get('why_none') or 'the cluster stage found none'}.")
    cards = []
    for r in rows:
        facts = [f"{r['size']:,} failures" + (f" ({pct(r['share'])} of all)" if r.get("share") is not None else ""),
                 esc(r.get("kind") or "")]
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
