"""`erroranalysis compare BASE CANDIDATE [CANDIDATE ...]`: what changed between runs of the same eval set.

With `--fail-on-regression` it is a gate for CI: exit code 3 (REGRESSION_EXIT) when a candidate is significantly
worse than the baseline (erroranalysis.compare.regressions says what counts), after printing what regressed."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, List, Optional

import typer

from erroranalysis.cli import common, options
from erroranalysis.cli.stage_groups import TRACKERS
from erroranalysis.compare.params import CompareParams

REGRESSION_EXIT = 3  # 0 success, 1 internal error, 2 bad input (common.handle_errors); 3 a regression was found


def register(app: typer.Typer) -> None:
    app.command("compare", help="Compare a baseline run with one or more candidates over the same eval set: deltas "
                                "with paired bootstrap intervals, McNemar, fixed/broken examples, error types and "
                                "clusters before and after; with several candidates, an ablation table.")(compare)


@common.handle_errors
@options.takes(options.Group("params", CompareParams), TRACKERS)
def compare(
    base: Annotated[Path, typer.Argument(help="The baseline run directory.")],
    candidates: Annotated[List[Path], typer.Argument(help="One or more candidate run directories (same eval set).")],
    out: Annotated[Optional[Path], typer.Option(
        "--out", "-o", help="Folder to write compare.json, compare.md and compare_examples.parquet to.")] = None,
    labels_db: Annotated[Optional[Path], typer.Option(
        "--labels-db", help="Labels database for error types; default: the nearest labels.sqlite above BASE "
                            "(see docs/labels.md), when there is one.")] = None,
    html: Annotated[Optional[Path], typer.Option(
        "--html", help="Also write the comparison as one self-contained HTML file here.")] = None,
    examples: Annotated[int, typer.Option("--examples", help="Fixed and broken examples to print.")] = 5,
    as_json: Annotated[bool, typer.Option("--json", help="Print the JSON report instead of tables.")] = False,
    fail_on_regression: Annotated[bool, typer.Option(
        "--fail-on-regression", help="Exit with code 3 when accuracy, macro F1 or a class's F1 is significantly lower "
                                     "(paired bootstrap interval below 0), or an error type or cluster gained "
                                     "significantly more newly failing examples than it lost (one-sided binomial).")] = False,
    *, params, trackers,
) -> None:
    """Compare runs: a baseline first, then candidates."""
    from erroranalysis import compare as cmp
    from erroranalysis import stages
    from erroranalysis.integrations import trackers as tracking

    trackers.require()
    alpha = params.alpha
    report = stages.compare_runs(base, candidates, labels_db=labels_db, params=params)
    written = stages.write_report(report, out) if out is not None else []
    if html is not None:
        written.append(stages.write_compare_html(report, html))
    found = [(c, cmp.regressions(c, alpha=alpha)) for c in report.doc["comparisons"]] if fail_on_regression \
        else []
    if as_json:
        typer.echo(cmp.to_json(report.doc), nl=False)
    else:
        console = common.console()
        console.soft_wrap = True
        _print(console, report.doc, examples)
        for path in written:
            typer.echo(f"wrote {path}")
        print_regressions(console, found, alpha)
    if trackers.log_to:
        print(f"logged to {', '.join(tracking.log_compare(report, trackers))}", file=sys.stderr)
    gate(found)


def print_regressions(out, found: list, alpha: float) -> None:
    """The gate's findings, one line each (nothing when the gate was not asked for)."""
    from rich.markup import escape

    for comp, items in found:
        out.print()
        if not items:
            out.print(f"No significant regression of {escape(comp['candidate'])} against {escape(comp['base'])} "
                      f"(alpha {alpha:g}).")
            continue
        out.print(f"[bold]Regressions[/bold] of {escape(comp['candidate'])} against {escape(comp['base'])} "
                  f"(alpha {alpha:g}):")
        for r in items:
            out.print(f"  - {escape(r['text'])}")


def gate(found: list) -> None:
    """Exit with REGRESSION_EXIT, and say so on stderr, when any comparison regressed."""
    import sys

    bad = [(comp, items) for comp, items in found if items]
    if not bad:
        return
    n = sum(len(items) for _, items in bad)
    names = ", ".join(comp["candidate"] for comp, _ in bad)
    print(f"regression: {n} significant regression{'s' if n != 1 else ''} in {names}; exit {REGRESSION_EXIT}",
          file=sys.stderr)
    raise typer.Exit(REGRESSION_EXIT)


def _print(out, doc: dict, n_examples: int) -> None:
    from rich.markup import escape
    from rich.table import Table

    from erroranalysis import compare as cmp
    from erroranalysis.report import compare_markdown as compare_report

    comps = doc["comparisons"]
    if len(comps) > 1:
        frame = cmp.series_frame(doc)
        table = Table(title="Ablation series (delta vs baseline in points [95% CI]; * excludes 0)", show_edge=False,
                      header_style="bold", title_justify="left")
        for i, col in enumerate(frame.columns):
            table.add_column(escape(str(col)), justify="left" if i < 2 else "right")
        for rec in frame.itertuples(index=False):
            table.add_row(*[escape(str(v)) for v in rec])
        out.print(table, soft_wrap=False)
    for comp in comps:
        out.print()
        out.print(f"[bold]{escape(comp['candidate'])}[/bold] vs [bold]{escape(comp['base'])}[/bold] (baseline): "
                  f"{escape(compare_report.headline(comp))}")
        for note in comp["notes"]:
            out.print(f"Note: {escape(note)}.")
        if len(comps) > 1:
            continue
        table = Table(show_edge=False, header_style="bold")
        for col in ("", "baseline", "candidate", "delta", "95% CI"):
            table.add_column(col, justify="right" if col else "left")
        for name in cmp.OVERALL:
            m = comp["overall"][name]
            table.add_row(name.replace("_", " "), compare_report.rate(m["base"]), compare_report.rate(m["candidate"]),
                          compare_report.pts(m["delta"]) + (" *" if m["significant"] else ""), compare_report.ci_text(m["ci"]))
        out.print(table, soft_wrap=False)
        table = Table(title="Per class F1", show_edge=False, header_style="bold", title_justify="left")
        for col in ("class", "support", "baseline", "candidate", "delta", "95% CI"):
            table.add_column(col, justify="left" if col == "class" else "right")
        for row in sorted(comp["per_class"], key=lambda r: r["f1"]["delta"] or 0):
            f1 = row["f1"]
            table.add_row(escape(row["label"]), f"{row['support']:,}", compare_report.rate(f1["base"]),
                          compare_report.rate(f1["candidate"]),
                          compare_report.pts(f1["delta"]) + (" *" if f1["significant"] else ""), compare_report.ci_text(f1["ci"]))
        out.print(table, soft_wrap=False)
        c = comp["counts"]
        out.print(f"{c['fixed']:,} fixed · {c['broken']:,} broken · {c['still_failing']:,} still failing · "
                  f"{c['still_correct']:,} still correct")
        for status in ("fixed", "broken"):
            for ex in comp["examples"][status][:n_examples]:
                out.print(f"  {status:>6}  {escape(ex['example_id'])}  {escape(ex['label'])}: "
                          f"{escape(ex['base_pred'])} → {escape(ex['candidate_pred'])}  "
                          f"{escape(ex['text'][:90])}")
        types = comp["error_types"]
        if types:
            table = Table(title="Error types (failures)", show_edge=False, header_style="bold", title_justify="left")
            for col in ("error type", "baseline", "fixed", "candidate", "of them suggested", "delta"):
                table.add_column(col, justify="left" if col == "error type" else "right")
            for r in types:
                none = r["candidate"] is None
                table.add_row(escape(r["name"]), f"{r['base']:,}", f"{r['fixed']:,}",
                              "–" if none else f"{r['candidate'] + r['candidate_suggested']:,}",
                              "–" if none else f"{r['candidate_suggested']:,}",
                              "–" if none else f"{r['delta']:+d}")
            out.print(table, soft_wrap=False)
            if types[0]["candidate"] is None:
                out.print("The candidate has no labels yet: run 'erroranalysis apply-taxonomy' with the baseline's "
                          "taxonomy to count its failures per error type.")
        cl = comp["clusters"]
        if cl["available"]:
            out.print(f"Clusters: {len(cl['persisted'])} persisted, {len(cl['vanished'])} vanished, "
                      f"{len(cl['appeared'])} appeared.")
            for r in cl["vanished"][:n_examples]:
                out.print(f"  vanished  #{r['cluster_id']} {escape(r['name'][:70])} ({r['size']:,}, "
                          f"{r['share_fixed']:.0%} fixed)")
            for r in cl["appeared"][:n_examples]:
                out.print(f"  appeared  #{r['cluster_id']} {escape(r['name'][:70])} ({r['size']:,}, "
                          f"{r['share_broken']:.0%} newly broken)")
