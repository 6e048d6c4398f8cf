"""`erroranalysis show RUN`: overall metrics, the per-class table and the confusion matrix in the terminal (a
generation run: its checks, failure modes, stop reasons and lengths first; cli/show_generation.py), the top
clusters, or why there are none."""

from __future__ import annotations

from typing import Annotated

import typer

from erroranalysis.cli import common
from erroranalysis.cli.show_classes import interval, print_classes


def print_summary(metrics: dict, run, top_clusters: int = 10) -> None:
    from rich.markup import escape

    out = common.console()
    o = metrics["overall"]
    out.print(f"[bold]{escape(str(run.path))}[/bold]  {o['n']} examples, {o['n_failures']} failures")
    if run.task == "generation" and metrics.get("output_checks"):
        from erroranalysis.cli.show_generation import print_generation

        print_generation(metrics, run, out)
    else:
        _print_headline(metrics, run, out)
        print_classes(metrics, run, out)
    _print_clusters(run, out, top_clusters)
    print_stage_problems(run, out)


def _print_headline(metrics: dict, run, out) -> None:
    o = metrics["overall"]
    if run.task in ("multilabel", "regression", "token-classification"):  # the task's own headline first
        from erroranalysis.tasks import headline

        out.print(headline(run.task, o) + (f"   ECE {o['ece']:.3f}   Brier {o['brier']:.3f}"
                                           if o.get("ece") is not None else ""), markup=False)
    else:
        out.print(f"accuracy {o['accuracy']:.3f}{interval(o.get('accuracy_ci'))}   macro F1 {o['macro_f1']:.3f}   "
                  f"weighted F1 {o['weighted_f1']:.3f}"
                  + (f"   ECE {o['ece']:.3f}   Brier {o['brier']:.3f}" if o.get("ece") is not None else ""))


def print_stage_problems(run, out) -> None:
    """Every stage that is not done, and why, with the command that resumes it: a run never looks complete when
    it is not."""
    manifest = run.manifest
    for name in manifest.get("stages", {}):
        reason = run.notice(name) or run.explain(name, manifest)
        if reason:
            out.print(f"{name}: {reason}", style="yellow", markup=False, soft_wrap=True)


def _print_clusters(run, out, limit: int) -> None:
    from rich.markup import escape
    from rich.table import Table

    top, n, why = clusters_shown(run, limit)
    if why is not None:
        out.print(f"No error clusters: {why}", style="yellow", markup=False, soft_wrap=True)
        return
    if top is None:
        return
    generation = run.task == "generation"
    table = Table(title=f"Error clusters (top {len(top)} of {n})", title_justify="left")
    for column in ("id", "size", "share", "name") + (("exemplar",) if generation else ()):
        table.add_column(column, justify="right" if column in ("id", "size", "share") else "left")
    for row in top:
        cells = [str(row["cluster_id"]), str(row["size"]), f"{row['share']:.1%}", escape(row["name"])]
        if generation:
            from erroranalysis.cli.show_generation import one_line

            ex = row.get("exemplar")
            cells.append(escape(f"{ex['example_id']}: {one_line(ex.get('output'))}" if ex else ""))
        table.add_row(*cells)
    out.print(table)


def clusters_shown(run, limit: int) -> tuple[list[dict] | None, int, str | None]:
    """(the largest `limit` clusters with their share of failures and, for a generation run, an exemplar output,
    how many there are, why there are none); the first is None when the run has no clustering to show."""
    from erroranalysis import stages
    from erroranalysis.rundir import readers

    clusters = readers.read_clusters(run, optional=True)
    if clusters is None or not len(clusters):
        return None, 0, stages.why_no_clusters(run)
    n_failures = max(1, int(run.metrics()["overall"].get("n_failures") or 0))
    head = clusters.head(limit)
    rows = [{"cluster_id": int(r.cluster_id), "size": int(r.size), "share": int(r.size) / n_failures,
             "kind": str(r.kind), "name": str(r.name)} for r in head.itertuples()]
    if run.task == "generation":
        first = [str(list(ids)[0]) for ids in head["exemplar_ids"] if len(ids)]
        found = readers.read_prediction_rows(run, first, columns=("example_id", "output", "failure_reason"))
        by_id = {r["example_id"]: r for r in found.to_dict("records")}
        for row, ids in zip(rows, head["exemplar_ids"]):
            ex = by_id.get(str(list(ids)[0])) if len(ids) else None
            row["exemplar"] = None if ex is None else {k: ex.get(k) for k in ("example_id", "output",
                                                                               "failure_reason")}
    return rows, len(clusters), None


def register(app: typer.Typer) -> None:
    @app.command("show")
    @common.handle_errors
    def show_command(
        run_dir: Annotated[str, typer.Argument(help="A run directory made by 'erroranalysis run' or 'analyze', or "
                                                    "the s3://, gs:// or az:// URL of one published with --out.")],
        clusters: Annotated[int, typer.Option("--clusters", help="How many error clusters to list.")] = 10,
        as_json: common.Json = False,
    ) -> None:
        """Print a run's overall metrics, per-class table, confusion matrix and top error clusters."""
        run = open_shown(run_dir)
        if run.task == "sft":  # a training-data check (`sft-check`): its summary, not metrics
            from erroranalysis.cli.sft_check import print_summary as print_sft
            from erroranalysis.rundir import readers

            summary, _, _ = readers.read_sft(run)
            if as_json:
                common.print_json({"run": str(run.path), "task": run.task, **summary})
            else:
                print_sft(run.path, summary)
            return
        if as_json:
            common.print_json(as_document(run, clusters))
            return
        print_summary(run.metrics(), run, clusters)


def open_shown(run_dir: str):
    """The run at a path, or at a URL: fetched (only what its manifest names, each object hash-checked) into its
    local mirror, which this read-only command may use; a writing command on a URL publishes instead."""
    from erroranalysis.core import storage
    from erroranalysis.rundir import Run, remote

    if storage.is_url(run_dir):
        return Run.open(remote.fetch(run_dir))
    return Run.open(run_dir)


def as_document(run, limit: int) -> dict:
    """What `show` prints, as data: the metrics, the top clusters, and each stage's state with why it is not done."""
    top, _, why = clusters_shown(run, limit)
    stages = {name: {"status": s["status"], "problem": run.notice(name) or run.explain(name, run.manifest)}
              for name, s in run.manifest.get("stages", {}).items()}
    from erroranalysis.metrics.headline import headline

    metrics = run.metrics()
    return {"run": str(run.path), "task": run.task, "headline": headline(run.task, metrics["overall"]),
            "metrics": metrics, "clusters": top or [], "why_no_clusters": why, "stages": stages}
