"""`erroranalysis show RUN`: overall metrics, the per-class table and the confusion matrix in the terminal."""

from __future__ import annotations

from typing import Annotated

import typer

from erroranalysis.cli import common


def _interval(ci) -> str:
    return f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""


def print_summary(metrics: dict, run, top_clusters: int = 10) -> None:
    from rich.markup import escape
    from rich.table import Table

    out = common.console()
    o = metrics["overall"]
    out.print(f"[bold]{escape(str(run.path))}[/bold]  {o['n']} examples, {o['n_failures']} failures")
    if run.task in ("multilabel", "regression"):
        from erroranalysis.cli.run import headline

        out.print(headline(run.task, o) + (f"   ECE {o['ece']:.3f}   Brier {o['brier']:.3f}"
                                           if o.get("ece") is not None else ""), markup=False)
    else:
        out.print(f"accuracy {o['accuracy']:.3f}{_interval(o.get('accuracy_ci'))}   macro F1 {o['macro_f1']:.3f}   "
                  f"weighted F1 {o['weighted_f1']:.3f}"
                  + (f"   ECE {o['ece']:.3f}   Brier {o['brier']:.3f}" if o.get("ece") is not None else ""))

    per_class = Table(title={"multilabel": "Per label", "regression": "Per gold range (bins)"}.get(run.task, "Per class"),
                      title_justify="left")
    for column in ("label", "precision", "recall", "F1 [95% CI]", "support"):
        per_class.add_column(column, justify="left" if column == "label" else "right")
    for row in sorted(metrics["per_class"], key=lambda r: r["f1"] if r["f1"] is not None else 0):
        per_class.add_row(escape(row["label"]), f"{row['precision']:.3f}", f"{row['recall']:.3f}",
                          f"{row['f1']:.3f}{_interval(row.get('f1_ci'))}", str(row["support"]))
    out.print(per_class)

    confusion = metrics["confusion"]
    title = "Confusion (rows: true, columns: predicted)" if run.task != "multilabel" else \
        "Labels read instead of others (rows: gold missed, columns: predicted without gold)"
    matrix = Table(title=title, title_justify="left")
    matrix.add_column("true \\ pred")
    for label in confusion["labels"]:
        matrix.add_column(escape(label), justify="right")
    for label, row in zip(confusion["labels"], confusion["matrix"]):
        matrix.add_row(escape(label), *[f"[bold]{v}[/bold]" if label == col else (f"[red]{v}[/red]" if v else "·")
                                for col, v in zip(confusion["labels"], row)])
    out.print(matrix)
    _print_clusters(run, out, top_clusters)
    print_stage_problems(run, out)


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

    from erroranalysis.rundir import readers

    clusters = readers.read_clusters(run, optional=True)
    if clusters is None:
        return
    table = Table(title=f"Error clusters (top {min(limit, len(clusters))} of {len(clusters)})", title_justify="left")
    for column in ("id", "size", "name"):
        table.add_column(column, justify="right" if column != "name" else "left")
    for row in clusters.head(limit).itertuples():
        table.add_row(str(row.cluster_id), str(row.size), escape(str(row.name)))
    out.print(table)


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


def as_document(run, top_clusters: int) -> dict:
    """What `show` prints, as data: the metrics, the top clusters, and each stage's state with why it is not done."""
    from erroranalysis.rundir import readers

    clusters = readers.read_clusters(run, optional=True)
    top = [] if clusters is None else [
        {"cluster_id": int(r.cluster_id), "size": int(r.size), "kind": str(r.kind), "name": str(r.name)}
        for r in clusters.head(top_clusters).itertuples()]
    stages = {name: {"status": s["status"], "problem": run.notice(name) or run.explain(name, run.manifest)}
              for name, s in run.manifest.get("stages", {}).items()}
    return {"run": str(run.path), "task": run.task, "metrics": run.metrics(), "clusters": top, "stages": stages}
