"""`erroranalysis slices RUN`: find groups of examples (words, metadata values, lengths) whose error rate stands out."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from erroranalysis.cli import common


def register(app: typer.Typer) -> None:
    @app.command("slices")
    @common.handle_errors
    def slices_command(
        run_dir: common.RunDir,
        min_support: Annotated[Optional[int], typer.Option(
            "--min-support",
            help="Smallest slice, in examples (default: 10, or 0.1% of the examples if more).")] = None,
        max_order: Annotated[int, typer.Option(
            "--max-order", help="Features per slice: 1 single features, 2 or 3 add their conjunctions.")] = 3,
        alpha: Annotated[float, typer.Option(
            "--alpha", help="SliceLine's weight of error rate against slice size, in (0, 1].")] = 0.95,
        top: Annotated[int, typer.Option("--top", help="Report at most this many slices.")] = 20,
        no_merge: Annotated[bool, typer.Option(
            "--no-merge", help="Do not merge near-synonymous word slices (skips the embedding model).")] = False,
    ) -> None:
        """Find error slices and write slices.parquet and slice_members.parquet into the run."""
        from erroranalysis import stages

        params = stages.SliceParams(min_support=min_support, max_order=max_order, alpha=alpha, top_k=top,
                                    merge=not no_merge)
        summary = stages.slices_run(run_dir, params)
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
