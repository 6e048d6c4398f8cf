"""`erroranalysis run`: a checkpoint over an eval set, then metrics and failure clusters."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from erroranalysis.cli import common

Model = Annotated[Path, typer.Option("--model", "-m", help="Checkpoint folder (config.json + model.safetensors).")]
Data = Annotated[Path, typer.Option("--data", "-d", help="Eval set: .jsonl, .csv, .parquet or a save_to_disk folder.")]
TextColumn = Annotated[str, typer.Option("--text-column", help="Column holding the input text.")]
LabelColumn = Annotated[str, typer.Option("--label-column", help="Column holding the gold label.")]
IdColumn = Annotated[Optional[str], typer.Option("--id-column", help="Column of unique example ids (default: row number).")]
Encoding = Annotated[str, typer.Option("--encoding", help="Text encoding of CSV/JSONL files.")]
Split = Annotated[Optional[str], typer.Option("--split", help="Split of a saved DatasetDict.")]
NoCluster = Annotated[bool, typer.Option("--no-cluster", help="Skip failure clustering.")]
NoSlices = Annotated[bool, typer.Option("--no-slices", help="Skip the search for error slices.")]


def data_options(text_column: str, label_column: str, id_column: str | None, encoding: str, split: str | None):
    from erroranalysis.pipeline import DataOptions

    return DataOptions(text_column=text_column, label_column=label_column, id_column=id_column,
                       encoding=encoding, split=split)


def report(run) -> None:
    """Where the results are, and the headline numbers."""
    overall = run.metrics()["overall"]
    out = common.console()
    out.print(f"[bold]{run.path}[/bold]: {overall['n']} examples, accuracy {overall['accuracy']:.3f}, "
              f"macro F1 {overall['macro_f1']:.3f}, {overall['n_failures']} failures")
    stages = run.manifest["stages"]
    out.print("stages: " + ", ".join(f"{name} {s['status']} ({s.get('seconds', 0):.1f}s)" for name, s in stages.items()))
    out.print(f"see it: erroranalysis show {run.path}   |   browse it: erroranalysis ui {run.path.parent}")


def progress_bar(description: str):
    """A rich progress bar with examples/s; returns (bar, advance(n, total))."""
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TaskProgressColumn, TextColumn,
                               TimeRemainingColumn)

    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TaskProgressColumn(),
                   TextColumn("{task.fields[rate]}"), TimeRemainingColumn(), transient=True)
    task = bar.add_task(description, total=None, rate="")

    def advance(n: int, total: int) -> None:
        bar.update(task, total=total, advance=n)
        speed = bar.tasks[0].speed
        if speed:
            bar.update(task, rate=f"{speed:.0f} ex/s")

    return bar, advance


def register(app: typer.Typer) -> None:
    @app.command("run")
    @common.handle_errors
    def run_command(
        model: Model,
        data: Data,
        out: common.OutDir,
        text_column: TextColumn = "text",
        label_column: LabelColumn = "label",
        id_column: IdColumn = None,
        encoding: Encoding = "utf-8",
        split: Split = None,
        batch_size: Annotated[int, typer.Option("--batch-size", help="Examples per forward pass.")] = 32,
        max_length: Annotated[int, typer.Option("--max-length", help="Tokens per example; longer texts are cut and flagged.")] = 256,
        precision: Annotated[str, typer.Option("--precision", help="fp32, or bf16 (autocast; always on with CUDA).")] = "fp32",
        device: Annotated[str, typer.Option("--device", help="auto (cuda, mps, cpu), cpu, cuda, cuda:N or mps.")] = "auto",
        trust_remote_code: Annotated[bool, typer.Option("--trust-remote-code", help="Allow code shipped with the checkpoint to run.")] = False,
        no_cluster: NoCluster = False,
        no_slices: NoSlices = False,
        seed: common.Seed = 0,
        overwrite: common.Overwrite = False,
    ) -> None:
        """Run a checkpoint over an eval set: predictions, metrics, failure clusters, in a run directory."""
        from erroranalysis.pipeline import AfterOptions, InferOptions, run_checkpoint

        infer_opts = InferOptions(batch_size=batch_size, max_length=max_length, precision=precision,
                                  device=device, trust_remote_code=trust_remote_code)
        bar, advance = progress_bar("inferring")
        with bar:
            result = run_checkpoint(model, data, out,
                                    data_opts=data_options(text_column, label_column, id_column, encoding, split),
                                    infer_opts=infer_opts, after=AfterOptions(cluster=not no_cluster, slices=not no_slices, seed=seed),
                                    overwrite=overwrite, progress=advance)
        report(result)
