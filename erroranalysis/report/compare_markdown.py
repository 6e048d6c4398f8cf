"""The comparison report in Markdown, and writing compare.json, compare.md and compare_examples.parquet.
"""

from __future__ import annotations

from erroranalysis.compare import OVERALL, series_frame
from erroranalysis.metrics.display import percent


def pts(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:+.1f}"


def rate(value: float | None) -> str:
    return percent(value)  # the one way a rate is shown (erroranalysis.metrics.display)


def ci_text(ci) -> str:
    if not ci or ci[0] is None:
        return ""
    return f"[{ci[0] * 100:+.1f}, {ci[1] * 100:+.1f}]"


def headline(comp: dict) -> str:
    """One line: accuracy before → after, the change with its interval, fixed/broken, McNemar."""
    acc, mc = comp["overall"]["accuracy"], comp["mcnemar"]
    return (f"accuracy {rate(acc['base'])} → {rate(acc['candidate'])} ({pts(acc['delta'])} points, "
            f"95% CI {ci_text(acc['ci'])}); {mc['fixed']:,} fixed, {mc['broken']:,} broken; McNemar "
            f"p = {mc['p_value']:.3g} ({mc['method']})")


def to_markdown(doc: dict, *, examples: int = 10) -> str:
    """The report for a pull request: ablation table, then per candidate the deltas, examples, error types and
    clusters. User text is escaped."""
    from erroranalysis.labels.taxonomy import md_code
    from erroranalysis.labels.taxonomy import md_escape as esc

    comps = doc["comparisons"]
    lines = [f"# Run comparison: {esc(doc['baseline'])} (baseline) vs {', '.join(esc(c['candidate']) for c in comps)}",
             ""]
    for r in doc["runs"]:
        mark = " **(baseline)**" if r["baseline"] else ""
        facts = [f"{r['n']:,} examples", f"accuracy {rate(r['accuracy'])}", f"{r['n_failures']:,} failures"]
        if r.get("model"):
            facts.insert(0, f"model `{md_code(r['model'])}`")
        lines.append(f"- **{esc(r['name'])}**{mark}: " + " · ".join(facts))
    b = doc["bootstrap"]
    lines += ["", f"Deltas are candidate − baseline in percentage points, with paired bootstrap "
                  f"{b['level']:.0%} intervals ({b['n_resamples']:,} resamples, seed {b['seed']}); * marks an "
                  "interval that excludes 0.", ""]
    if len(comps) > 1:
        lines += ["## Ablation series", ""]
        frame = series_frame(doc)
        header = ["", ""] + [esc(c) for c in frame.columns[2:]]
        lines.append("| section | name | " + " | ".join(header[2:]) + " |")
        lines.append("| --- | --- | " + " | ".join("---:" for _ in header[2:]) + " |")
        for rec in frame.itertuples(index=False):
            lines.append(f"| {esc(rec[0])} | {esc(rec[1])} | " + " | ".join(esc(v) for v in rec[2:]) + " |")
        lines.append("")
    for comp in comps:
        lines += [f"## {esc(comp['candidate'])} vs {esc(comp['base'])}", "", headline(comp) + ".", ""]
        for note in comp["notes"]:
            lines.append(f"_Note: {esc(note)}._")
        lines += ["| metric | baseline | candidate | delta | 95% CI |", "| --- | ---: | ---: | ---: | ---: |"]
        for name in OVERALL:
            m = comp["overall"][name]
            lines.append(f"| {name.replace('_', ' ')} | {rate(m['base'])} | {rate(m['candidate'])} | "
                         f"{pts(m['delta'])}{' *' if m['significant'] else ''} | {ci_text(m['ci'])} |")
        lines += ["", "### Per class (F1)", "",
                  "| class | support | baseline | candidate | delta | 95% CI | recall delta | precision delta |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for row in sorted(comp["per_class"], key=lambda r: (r["f1"]["delta"] or 0)):
            f1 = row["f1"]
            lines.append(f"| {esc(row['label'])} | {row['support']:,} | {rate(f1['base'])} | "
                         f"{rate(f1['candidate'])} | {pts(f1['delta'])}{' *' if f1['significant'] else ''} | "
                         f"{ci_text(f1['ci'])} | {pts(row['recall']['delta'])} | "
                         f"{pts(row['precision']['delta'])} |")
        counts = comp["counts"]
        lines += ["", "### Examples", "",
                  f"{counts['fixed']:,} fixed · {counts['broken']:,} broken · {counts['still_failing']:,} still "
                  f"failing ({counts['still_failing_other_pred']:,} with another wrong prediction) · "
                  f"{counts['still_correct']:,} still correct.", ""]
        for status in ("fixed", "broken"):
            rows = comp["examples"][status]
            if not rows:
                continue
            first = f", first {examples}" if len(rows) > examples else ""
            lines += [f"**{status.capitalize()}** ({len(rows):,}{first}):", "",
                      "| example | label | baseline | candidate | text |", "| --- | --- | --- | --- | --- |"]
            for ex in rows[:examples]:
                lines.append(f"| `{md_code(ex['example_id'])}` | {esc(ex['label'])} | {esc(ex['base_pred'])} | "
                             f"{esc(ex['candidate_pred'])} | {esc(ex['text'], 120)} |")
            lines.append("")
        types = comp["error_types"]
        lines += ["### Error types", ""]
        if types is None:
            lines += ["_No labels database: label the baseline in the app and apply its taxonomy to the candidate "
                      "(`erroranalysis apply-taxonomy`) to see error types before and after._", ""]
        elif not types:
            lines += ["_No error types labeled in these runs yet._", ""]
        else:
            lines += ["| error type | baseline failures | fixed | still failing | candidate failures | of them "
                      "suggested | delta |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
            for r in types:
                after = "–" if r["candidate"] is None else f"{r['candidate'] + r['candidate_suggested']:,}"
                pending = "–" if r["candidate_suggested"] is None else f"{r['candidate_suggested']:,}"
                delta = "–" if r["delta"] is None else f"{r['delta']:+d}"
                lines.append(f"| {esc(r['name'], 60)} | {r['base']:,} | {r['fixed']:,} | {r['still_failing']:,} | "
                             f"{after} | {pending} | {delta} |")
            lines.append("")
            if types[0]["candidate"] is None:
                lines += [f"_{esc(comp['candidate'])} has no labels yet: apply the baseline's taxonomy to it "
                          "(`erroranalysis apply-taxonomy`) to count its failures per error type._", ""]
        cl = comp["clusters"]
        lines += ["### Clusters", ""]
        if not cl["available"]:
            lines += [f"_Not compared: {esc(cl['reason'])}._", ""]
        else:
            lines.append(f"{len(cl['persisted'])} persisted, {len(cl['vanished'])} vanished, {len(cl['appeared'])} "
                         f"appeared (matched by shared still-failing members, overlap >= {cl['min_overlap']}).")
            lines.append("")
            for r in cl["vanished"][:examples]:
                lines.append(f"- vanished: #{r['cluster_id']} {esc(r['name'], 80)} ({r['size']:,} failures, "
                             f"{r['share_fixed']:.0%} fixed)")
            for r in cl["appeared"][:examples]:
                lines.append(f"- appeared: #{r['cluster_id']} {esc(r['name'], 80)} ({r['size']:,} failures, "
                             f"{r['share_broken']:.0%} newly broken)")
            for r in cl["persisted"][:examples]:
                lines.append(f"- persisted: #{r['base_id']} {esc(r['base_name'], 60)} → #{r['candidate_id']} "
                             f"({r['base_size']:,} → {r['candidate_size']:,} failures)")
            lines.append("")
    lines.append(f"<sub>erroranalysis {esc(doc['tool']['version'])} · compare schema v{doc['schema_version']} · "
                 f"{esc(doc['generated'])}</sub>")
    return "\n".join(lines) + "\n"
