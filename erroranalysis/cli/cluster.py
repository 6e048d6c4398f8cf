"""`erroranalysis cluster RUN`: (re-)cluster a run's failures into named error types, without re-running inference."""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Optional

import typer

from erroranalysis.cli import common


class ReducerName(str, Enum):
    umap = "umap"
    pca = "pca"
    none = "none"


def register(app: typer.Typer) -> None:
    app.command("cluster", help="Embed a run's failing examples, cluster them into error types and name them. "
                                "Writes embeddings.npy/.json, clusters.parquet and assignments.parquet; re-runnable "
                                "with other settings without re-running inference.")(cluster)


@common.handle_errors
def cluster(
    run_dir: common.RunDir,
    embedder: Annotated[str, typer.Option(
        "--embedder", "-e", help="minilm (packaged sentence model, cached), hidden (the checkpoint's own hidden "
                                 "states) or FILE.npy (one row per prediction, or rows named by FILE.json "
                                 "{\"example_ids\": [...]}).")] = "minilm",
    min_cluster_size: Annotated[Optional[int], typer.Option(
        "--min-cluster-size", "-m", help="Smallest error cluster (>= 2); default scales with the failures: "
                                         "max(5, sqrt(n)/2) for n failures (per tier with --error-aware).")] = None,
    min_samples: Annotated[Optional[int], typer.Option(
        "--min-samples", help="HDBSCAN density smoothing; default = min cluster size. Lower finds more, "
                              "smaller clusters.")] = None,
    seed: common.Seed = 0,
    reducer: Annotated[ReducerName, typer.Option(
        "--reducer", help="umap (default, cosine, 5-d), pca (no compilation) or none.")] = ReducerName.umap,
    n_components: Annotated[Optional[int], typer.Option(
        "--components", help="Reduced dimensions (default 5 for umap, 10 for pca).")] = None,
    n_neighbors: Annotated[int, typer.Option("--neighbors", help="UMAP neighbourhood size.")] = 15,
    error_aware: Annotated[bool, typer.Option(
        "--error-aware/--no-error-aware", help="Cluster failures in regions where the model fails more than "
                                               "usual apart from failures scattered among correct examples.")] = True,
    pair_weight: Annotated[float, typer.Option(
        "--pair-weight", help="Let the (label, pred) confusion pair take part in clustering with this weight "
                              "(0 = off; 0.3 to 0.7 nudges clusters toward one confusion each).")] = 0.0,
    assign_noise: Annotated[float, typer.Option(
        "--assign-noise", help="An unclustered failure joins its nearest cluster when its membership reaches "
                               "this (0 to 1).")] = 0.5,
    keep_noise: Annotated[bool, typer.Option("--keep-noise", help="Never assign unclustered failures.")] = False,
    slice_groups: Annotated[bool, typer.Option(
        "--slice-groups/--no-slice-groups", help="When the slices stage ran: a strong error slice whose failures "
                                                 "the embedding scattered over other clusters becomes a cluster "
                                                 "of its own, named by the slice.")] = True,
    group_purity: Annotated[float, typer.Option(
        "--group-purity", help="A strong slice becomes a cluster of its own when, on average, its failures make up "
                               "less than this share of the clusters they fall in (unclustered counts as 0; 0 to 1, "
                               "0 turns slice groups off).")] = 0.7,
    parent_similarity: Annotated[float, typer.Option(
        "--parent-similarity", help="Clusters whose directions are at least this similar (cosine, -1 to 1) get a "
                                    "shared parent error type.")] = 0.6,
    no_parents: Annotated[bool, typer.Option("--no-parents", help="Do not group clusters under parents.")] = False,
    layout: Annotated[ReducerName, typer.Option(
        "--layout", help="2-D map of all examples: umap, pca or none.")] = ReducerName.umap,
    max_fit: Annotated[int, typer.Option(
        "--max-fit", help="Above this many failures, fit on a sample and assign the rest.")] = 20_000,
    n_keywords: Annotated[int, typer.Option("--keywords", help="Keywords per cluster.")] = 8,
    n_exemplars: Annotated[int, typer.Option("--exemplars", help="Exemplar ids per cluster.")] = 5,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Do not read or write the embedding cache.")] = False,
    names_only: Annotated[bool, typer.Option(
        "--names-only", help="Only recompute names, keywords and exemplars of the existing clusters.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Cluster a run's failing examples into named error types."""
    import json

    from erroranalysis import stages

    out = common.console()
    if names_only:
        summary = stages.name_run(run_dir, n_keywords=n_keywords, n_exemplars=n_exemplars, seed=seed)
    else:
        params = stages.ClusterParams(
            embedder=embedder, min_cluster_size=min_cluster_size, min_samples=min_samples, seed=seed,
            reducer=reducer.value, n_components=n_components, n_neighbors=n_neighbors, error_aware=error_aware,
            pair_weight=pair_weight, assign_noise=None if keep_noise else assign_noise, layout=layout.value,
            max_fit=max_fit, slice_groups=slice_groups, group_purity=group_purity,
            parent_similarity=None if no_parents else parent_similarity, n_keywords=n_keywords,
            n_exemplars=n_exemplars, cache=not no_cache)
        with _progress(out, quiet=as_json or not out.is_terminal) as progress:
            summary = stages.cluster_run(run_dir, params, progress=progress)
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
        return
    _print(out, summary)


class _progress:
    """A rich progress bar over the stage's phases (embed, cluster, layout); silent when quiet (--json, or
    output that is not a terminal)."""

    def __init__(self, console, quiet: bool = False):
        self.console = console
        self.quiet = quiet

    def __enter__(self):
        if self.quiet:
            return None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            console=self.console, transient=True)
        self.bar.__enter__()
        self.tasks: dict[str, int] = {}

        def update(phase: str, done: int, total: int) -> None:
            if phase not in self.tasks:
                self.tasks[phase] = self.bar.add_task(phase, total=max(total, 1))
            self.bar.update(self.tasks[phase], completed=done, total=max(total, 1))

        return update

    def __exit__(self, *exc):
        if not self.quiet:
            self.bar.__exit__(*exc)
        return False


def _print(out, summary: dict) -> None:
    from rich.markup import escape
    from rich.table import Table

    n_fail, n_clusters = summary.get("n_failures"), summary.get("n_clusters", len(summary["clusters"]))
    if n_fail is not None:
        out.print(f"{escape(summary['run'])}: {n_fail} failures of {summary['n_examples']} examples -> {n_clusters} clusters, "
                  f"{summary['noise_share']:.1%} unclustered (embedder {summary['embedder']}, "
                  f"min cluster size {summary['min_cluster_size']}, {summary['seconds']:.1f} s)")
        if summary.get("note"):
            out.print(f"note: {summary['note']}", markup=False)
    if not summary["clusters"]:
        return
    table = Table(title="Error clusters, by failures they hold", title_justify="left")
    for column, justify in (("id", "right"), ("size", "right"), ("kind", "left"), ("name", "left")):
        table.add_column(column, justify=justify)
    for c in summary["clusters"]:
        table.add_row(str(c["cluster_id"]), str(c["size"]), escape(c["kind"]), escape(c["name"]))
    out.print(table)
