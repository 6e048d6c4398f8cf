"""`erroranalysis data-checks RUN [--train FILE]`: label issues, duplicates, leakage and distribution shift (the
data checks; a generation run's output checks are something else: `run --output-checks`)."""

from __future__ import annotations

from pathlib import Path

import typer

from erroranalysis.cli import common, options
from erroranalysis.cli import stage_groups as groups

STYLES = {"error": "bold red", "warning": "yellow", "info": "cyan"}
# the stage's own command: no switch to turn it off; the flags renamed in 0.3 still work here for one release
CHECKS = options.Group("checks", groups.CHECKS.params, deprecated={
    "--embedder": "embedder", "--neighbors": "neighbors", "--encoding": "encoding", "--split": "split"})
HELP = ("Is the label or the data wrong? Label issues (confident learning), exact and near duplicates, label "
        "conflicts, and with --train: train/eval leakage and distribution shift. Writes checks.parquet and "
        "checks.json into the run.")


def register(app: typer.Typer) -> None:
    app.command("data-checks", help=HELP)(data_checks)
    app.command("checks", help="Old name of data-checks (removed in the next release).", hidden=True)(old_name)


@common.handle_errors
@options.takes(CHECKS, groups.ENGINE)
def data_checks(run: common.RunDir, as_json: common.Json = False, *, checks, engine) -> None:
    """Check the run's labels and data: label issues, duplicates, leakage, shift."""
    _check(run, as_json, checks, engine)


@common.handle_errors
@options.takes(CHECKS, groups.ENGINE)
def old_name(run: common.RunDir, as_json: common.Json = False, *, checks, engine) -> None:
    import sys

    print("warning: 'erroranalysis checks' is now 'erroranalysis data-checks' (the old name goes in the next "
          "release).", file=sys.stderr)
    _check(run, as_json, checks, engine)


def _check(run: Path, as_json: bool, checks, engine) -> None:
    from erroranalysis import stages
    from erroranalysis.core.progress import reporter

    summary = stages.checks_run(run, checks, progress=reporter(), engine=engine)
    if as_json:
        common.print_json({"run": str(run), **summary})
        return
    _print(common.console(), run, summary)


def _print(out, run: Path, summary: dict) -> None:
    from rich.markup import escape

    parts = [f"{summary['n_examples']} examples"]
    if summary["n_label_issues"] is not None:
        parts.append(f"{summary['n_label_issues']} probable label issues")
    parts.append(f"{summary['n_duplicate_groups']} duplicate groups ({summary['n_conflict_groups']} with "
                 "conflicting labels)")
    searched = summary.get("near_sample")
    if searched and searched["rows"] < searched["of"]:
        parts.append(f"near duplicates searched among a seeded sample of {searched['rows']} rows")
    if summary["n_in_train"] is not None:
        parts.append(f"{summary['n_in_train']} also in train")
    if summary.get("n_contaminated") is not None:
        parts.append(_contamination_part(summary))
    if summary["domain_auc"] is not None:
        parts.append(f"domain-classifier AUC {summary['domain_auc']:.2f}")
    out.print(f"[bold]{escape(str(run))}[/bold]: " + ", ".join(parts), soft_wrap=True)
    if not summary["findings"]:
        out.print("[green]No problems found[/green] in labels or data.")
    for f in summary["findings"]:
        out.print(f"\n[{STYLES[f['severity']]}]{f['severity'].upper()}[/] {escape(f['message'])}.", soft_wrap=True)
        out.print(f"  what to do: {escape(f['advice'])}", soft_wrap=True)
    out.print(f"\nper example: {Path(run) / 'checks.parquet'}   |   report: {Path(run) / 'checks.json'}",
              soft_wrap=True, markup=False)


def _contamination_part(summary: dict) -> str:
    text = f"{summary['n_contaminated']} sharing a {summary['ngram']}-gram with train"
    clean, dirty = summary["pass_rate_clean"], summary["pass_rate_contaminated"]
    if dirty is not None and clean is not None:
        text += f" (pass rate {dirty:.1%} on them, {clean:.1%} on the clean ones)"
    groups = summary.get("n_train_near_duplicate_groups")
    if groups:
        text += f", {groups} near-duplicate groups of training prompts"
    return text
