"""`erroranalysis slices RUN`: find groups of examples (words, metadata values, lengths) whose error rate stands out."""

from __future__ import annotations

import typer

from erroranalysis.cli import common, options
from erroranalysis.cli import stage_groups as groups

# the stage's own command: no switch to turn it off; the flags renamed in 0.3 still work here for one release
SLICES = options.Group("slices", groups.SLICES.params, deprecated={"--top": "top_k", "--alpha": "alpha"})


def register(app: typer.Typer) -> None:
    @app.command("slices")
    @common.handle_errors
    @options.takes(SLICES, groups.ENGINE)
    def slices_command(run_dir: common.RunDir, as_json: common.Json = False, *, slices, engine) -> None:
        """Find error slices and write slices.parquet and slice_members.parquet into the run."""
        from erroranalysis import stages

        summary = stages.slices_run(run_dir, slices, engine=engine)
        if as_json:
            common.print_json(summary)
            return
        print_slices(summary)


def print_slices(summary: dict) -> None:
    from rich.markup import escape
    from rich.table import Table

    out = common.console()
    base = summary["base_error_rate"]
    out.print(f"{escape(summary['run'])}: {summary['n_examples']} examples, {summary['n_failures']} failures "
              f"(error rate {base:.3f}); {summary['n_features']} features, {summary['n_tested']} slices tested "
              f"in {summary['feature_seconds'] + summary['search_seconds']:.1f} s")
    for message in summary["messages"]:
        out.print(f"note: {message}", markup=False)
    if not summary["slices"]:
        out.print("no slice found; wrote an empty slices.parquet.")
        return
    table = Table(show_lines=False)
    for name, justify in [("#", "right"), ("slice", "left"), ("support", "right"), ("failures", "right"),
                          ("error rate", "right"), ("x base", "right"), ("p-value", "right")]:
        table.add_column(name, justify=justify)
    for row in summary["slices"]:
        table.add_row(str(row["slice_id"]), escape(row["description"]), str(row["support"]), str(row["failures"]),
                      f"{row['error_rate']:.3f}", f"{row['error_rate'] / base:.1f}",
                      f"{row['p_value']:.1e}" if row["p_value"] > 0 else "<1e-300")
    out.print(table)
    out.print(f"wrote {', '.join(summary['files'])}", markup=False)
