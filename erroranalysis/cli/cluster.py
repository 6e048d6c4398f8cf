"""`erroranalysis cluster RUN`: (re-)cluster a run's failures into named error types, without re-running inference."""

from __future__ import annotations

from typing import Annotated

import typer

from erroranalysis.cli import common, options
from erroranalysis.cli import stage_groups as groups

CLUSTER = options.Group("cluster", groups.CLUSTER.params)  # the stage's own command: no switch to turn it off


def register(app: typer.Typer) -> None:
    app.command("cluster", help="Embed a run's failing examples, cluster them into error types and name them. "
                                "Writes embeddings.npy/.json, clusters.parquet and assignments.parquet; re-runnable "
                                "with other settings without re-running inference.")(cluster)


@common.handle_errors
@options.takes(CLUSTER, groups.ENGINE)
def cluster(
    run_dir: common.RunDir,
    names_only: Annotated[bool, typer.Option(
        "--names-only", help="Only recompute names, keywords and exemplars of the existing clusters.")] = False,
    as_json: common.Json = False,
    *, cluster, engine,
) -> None:
    """Cluster a run's failing examples into named error types."""
    from erroranalysis import stages
    from erroranalysis.core.progress import reporter

    if names_only:
        summary = stages.name_run(run_dir, cluster)
    else:
        summary = stages.cluster_run(run_dir, cluster, progress=reporter().phases("cluster"), engine=engine)
    if as_json:
        common.print_json(summary)
        return
    _print(common.console(), summary)


def _print(out, summary: dict) -> None:
    from rich.markup import escape
    from rich.table import Table

    n_fail, n_clusters = summary.get("n_failures"), summary.get("n_clusters", len(summary["clusters"]))
    if n_fail is not None:
        out.print(f"{escape(summary['run'])}: {n_fail} failures of {summary['n_examples']} examples -> {n_clusters} clusters, "
                  f"{summary['noise_share']:.1%} unclustered (embedder {summary['embedder']}, "
                  f"min cluster size {summary['min_cluster_size']}, {summary['seconds']:.1f} s)")
        for key in ("note", "embedder_note"):
            if summary.get(key):
                out.print(f"note: {summary[key]}", markup=False)
    if not summary["clusters"]:
        return
    table = Table(title="Error clusters, by failures they hold", title_justify="left")
    for column, justify in (("id", "right"), ("size", "right"), ("kind", "left"), ("name", "left")):
        table.add_column(column, justify=justify)
    for c in summary["clusters"]:
        table.add_row(str(c["cluster_id"]), str(c["size"]), escape(c["kind"]), escape(c["name"]))
    out.print(table)
