"""A comparison (the compare document, docs/compare.md) as one HTML page (pure).

Sections, always present: runs, overall (per candidate: deltas with paired intervals, McNemar), per-class (F1
deltas), examples (fixed and broken, the first EXAMPLES of each), error-types, clusters; and series (the ablation
table) with several candidates.
"""

from __future__ import annotations

from erroranalysis.compare import OVERALL, series_frame
from erroranalysis.report import compare_markdown as compare_report
from erroranalysis.report import figures
from erroranalysis.report.page import cut, esc, figure, note, num, page, pct, table

SECTIONS = ("runs", "overall", "per-class", "examples", "error-types", "clusters")
EXAMPLES = 15
TEXT_CHARS = 240


def render_compare(doc: dict) -> str:
    comps = doc["comparisons"]
    parts = [("runs", "Runs", runs(doc))]
    if len(comps) > 1:
        parts.append(("series", "Ablation series", series(doc)))
    parts += [("overall", "Overall", _each(comps, overall)), ("per-class", "Per class", _each(comps, per_class)),
              ("examples", "Fixed and broken examples", _each(comps, examples)),
              ("error-types", "Error types", _each(comps, error_types)),
              ("clusters", "Clusters", _each(comps, clusters))]
    names = ", ".join(c["candidate"] for c in comps)
    b = doc["bootstrap"]
    subtitle = (f"baseline {doc['baseline']} vs {names} · deltas in points with paired bootstrap {b['level']:.0%} "
                f"intervals ({b['n_resamples']:,} resamples); * marks an interval that excludes 0")
    return page(f"erroranalysis comparison: {doc['baseline']} vs {names}", subtitle, parts,
                footer=f"erroranalysis {doc['tool']['version']} · compare schema v{doc['schema_version']} · "
                       f"{doc['generated']}")


def _each(comps: list[dict], part) -> str:
    if len(comps) == 1:
        return part(comps[0])
    return "".join(f"<h3>{esc(c['candidate'])} vs {esc(c['base'])}</h3>{part(c)}" for c in comps)


def runs(doc: dict) -> str:
    return table(doc["runs"], [("name", "run", None), ("baseline", "baseline", lambda v: "yes" if v else ""),
                               ("model", "model", None), ("n", "examples", lambda v: f"{v:,}"),
                               ("n_failures", "failures", lambda v: f"{v:,}"), ("accuracy", "accuracy", pct)])


def series(doc: dict) -> str:
    frame = series_frame(doc)
    columns = [(c, c, None) for c in frame.columns]
    return table(frame.astype(str).to_dict("records"), columns)


def _delta(m: dict) -> str:
    return esc(compare_report.pts(m["delta"]) + (" *" if m["significant"] else ""))


def overall(comp: dict) -> str:
    rows = [{"metric": name.replace("_", " "), **comp["overall"][name]} for name in OVERALL]
    body = note(compare_report.headline(comp))
    for text in comp["notes"]:
        body += note(f"Note: {text}.")
    return body + table(rows, [("metric", "metric", None), ("base", "baseline", pct), ("candidate", "candidate", pct),
                               (lambda r: r, "delta", _delta),
                               (lambda r: compare_report.ci_text(r["ci"]), "95% CI", esc)])


def per_class(comp: dict) -> str:
    rows = sorted(comp["per_class"], key=lambda r: r["f1"]["delta"] or 0)
    fig = figure(figures.f1_deltas(rows, f"F1 change per class: {comp['candidate']} vs {comp['base']}"))
    return fig + table(rows, [
        ("label", "class", None), ("support", "support", lambda v: f"{v:,}"),
        (lambda r: r["f1"]["base"], "F1 baseline", num), (lambda r: r["f1"]["candidate"], "F1 candidate", num),
        (lambda r: r["f1"], "F1 delta", _delta), (lambda r: compare_report.ci_text(r["f1"]["ci"]), "95% CI", esc),
        (lambda r: compare_report.pts(r["recall"]["delta"]), "recall delta", esc),
        (lambda r: compare_report.pts(r["precision"]["delta"]), "precision delta", esc)])


def examples(comp: dict) -> str:
    c = comp["counts"]
    body = note(f"{c['fixed']:,} fixed · {c['broken']:,} broken · {c['still_failing']:,} still failing · "
                f"{c['still_correct']:,} still correct.")
    for status in ("fixed", "broken"):
        rows = comp["examples"][status]
        shown = f" (the first {EXAMPLES} of {len(rows):,})" if len(rows) > EXAMPLES else ""
        body += f"<h3>{status.capitalize()}{esc(shown)}</h3>" + table(rows[:EXAMPLES], [
            ("example_id", "example", None), ("label", "label", None), ("base_pred", "baseline", None),
            ("candidate_pred", "candidate", None), ("text", "text", lambda v: esc(cut(v, TEXT_CHARS)))])
    return body


def error_types(comp: dict) -> str:
    types = comp["error_types"]
    if types is None:
        return note("No labels database: label the baseline in the app and apply its taxonomy to the candidate "
                    "(erroranalysis apply-taxonomy) to see error types before and after.")
    if not types:
        return note("No error types labeled in these runs yet.")
    count = lambda v: "–" if v is None else f"{v:,}"  # noqa: E731
    return table(types, [("name", "error type", None), ("base", "baseline failures", count), ("fixed", "fixed", count),
                         ("still_failing", "still failing", count), ("candidate", "candidate failures", count),
                         ("delta", "delta", lambda v: "–" if v is None else f"{v:+d}")])


def clusters(comp: dict) -> str:
    cl = comp["clusters"]
    if not cl["available"]:
        return note(f"Not compared: {cl['reason']}.")
    body = note(f"{len(cl['persisted'])} persisted, {len(cl['vanished'])} vanished, {len(cl['appeared'])} appeared "
                f"(matched by shared still-failing members, overlap >= {cl['min_overlap']}).")
    size = lambda v: f"{v:,}"  # noqa: E731
    body += "<h3>Vanished</h3>" + table(cl["vanished"][:EXAMPLES], [
        ("cluster_id", "#", None), ("name", "cluster", None), ("size", "failures", size),
        ("share_fixed", "fixed", pct)])
    body += "<h3>Appeared</h3>" + table(cl["appeared"][:EXAMPLES], [
        ("cluster_id", "#", None), ("name", "cluster", None), ("size", "failures", size),
        ("share_broken", "newly broken", pct)])
    body += "<h3>Persisted</h3>" + table(cl["persisted"][:EXAMPLES], [
        ("base_name", "baseline cluster", None), ("base_size", "baseline failures", size),
        ("candidate_size", "candidate failures", size)])
    return body
