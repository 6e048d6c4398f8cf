"""`erroranalysis checks RUN [--train FILE]`: label issues, duplicates, leakage and distribution shift."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from erroranalysis.cli import common

STYLES = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def register(app: typer.Typer) -> None:
    app.command("checks", help="Is the label or the data wrong? Label issues (confident learning), exact and near "
                               "duplicates, label conflicts, and with --train: train/eval leakage and "
                               "distribution shift. Writes checks.parquet and checks.json into the run.")(checks)


@common.handle_errors
def checks(
    run: common.RunDir,
    train: Annotated[Optional[Path], typer.Option("--train", help="Training file (.jsonl, .csv, .parquet or a "
                                                  "save_to_disk folder) for leakage and shift checks.")] = None,
    train_text_column: Annotated[Optional[str], typer.Option(
        "--train-text-column", help="Text column of the train file (default: the eval set's).")] = None,
    train_label_column: Annotated[Optional[str], typer.Option(
        "--train-label-column", help="Label column of the train file (default: the eval set's).")] = None,
    train_id_column: Annotated[Optional[str], typer.Option(
        "--train-id-column", help="Id column of the train file (default: row number).")] = None,
    encoding: Annotated[str, typer.Option("--encoding", help="Text encoding of a CSV/JSONL train file.")] = "utf-8",
    split: Annotated[Optional[str], typer.Option("--split", help="Split of a saved DatasetDict train file.")] = None,
    embedder: Annotated[str, typer.Option("--embedder", help="Vectors of near duplicates, leakage and shift: auto "
                                          "(the checkpoint's hidden states when the run has them, else MiniLM), "
                                          "hidden, minilm (packaged sentence model) or none (exact duplicates "
                                          "only, no domain classifier).")] = "auto",
    near_threshold: Annotated[float, typer.Option("--near-threshold", help="Cosine similarity at or above which "
                                                  "two texts are near duplicates.")] = 0.95,
    neighbors: Annotated[int, typer.Option("--neighbors", help="Nearest neighbours kept per text.")] = 10,
    no_shift: Annotated[bool, typer.Option("--no-shift", help="Skip the distribution-shift report.")] = False,
    engine: Annotated[str, typer.Option("--engine", help="Where MiniLM embedding runs: local or ray.")] = "local",
    ray_address: Annotated[Optional[str], typer.Option("--ray-address", help="With --engine ray: auto or "
                                                       "HOST:PORT; default: a local Ray.")] = None,
    seed: common.Seed = 0,
) -> None:
    """Check the run's labels and data: label issues, duplicates, leakage, shift."""
    from erroranalysis import stages

    params = stages.CheckParams(train=str(train) if train else None, embedder=embedder,
                                near_threshold=near_threshold, neighbors=neighbors, shift=not no_shift,
                                train_text_column=train_text_column, train_label_column=train_label_column,
                                train_id_column=train_id_column, encoding=encoding, split=split, seed=seed)
    from erroranalysis.engines import Engine
    from erroranalysis.progress import reporter

    out = common.console()
    summary = stages.checks_run(run, params, progress=reporter(), engine=Engine(engine, ray_address))
    _print(out, run, summary)


def _print(out, run: Path, summary: dict) -> None:
    from rich.markup import escape

    parts = [f"{summary['n_examples']} examples"]
    if summary["n_label_issues"] is not None:
        parts.append(f"{summary['n_label_issues']} probable label issues")
    parts.append(f"{summary['n_duplicate_groups']} duplicate groups ({summary['n_conflict_groups']} with "
                 "conflicting labels)")
    if summary["n_in_train"] is not None:
        parts.append(f"{summary['n_in_train']} also in train")
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
