"""`erroranalysis doctor --model DIR --data FILE`: the whole debugging checklist, one Markdown report."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from erroranalysis.cli import common

MARK = {"problem": "[bold red]PROBLEM[/]", "warning": "[yellow]WARNING[/]", "ok": "[green]OK[/]",
        "skipped": "[dim]skipped[/]"}


def register(app: typer.Typer) -> None:
    app.command("doctor", help="Run the debugging checklist in order (memorize, training loss, validation loss, "
                               "which classes fail, which examples fail, labels or data wrong) and write one "
                               "report, doctor.md, in the run directory.")(doctor)


@common.handle_errors
def doctor(
    model: Annotated[Path, typer.Option("--model", "-m", help="Checkpoint folder (config.json + model.safetensors).")],
    data: Annotated[Path, typer.Option("--data", "-d", help="Eval set: .jsonl, .csv, .parquet or a save_to_disk folder.")],
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Run directory to write (default: "
                                                "runs/<checkpoint name>-doctor).")] = None,
    train: Annotated[Optional[Path], typer.Option("--train", help="Training file, for leakage and shift checks.")] = None,
    log: Annotated[Optional[Path], typer.Option("--log", help="Training log: trainer_state.json, TensorBoard "
                                                "events or a CSV/JSONL log (default: found in the checkpoint).")] = None,
    text_column: Annotated[str, typer.Option("--text-column", help="Column holding the input text.")] = "text",
    label_column: Annotated[str, typer.Option("--label-column", help="Column holding the gold label.")] = "label",
    id_column: Annotated[Optional[str], typer.Option("--id-column", help="Column of unique example ids.")] = None,
    encoding: Annotated[str, typer.Option("--encoding", help="Text encoding of CSV/JSONL files.")] = "utf-8",
    split: Annotated[Optional[str], typer.Option("--split", help="Split of a saved DatasetDict.")] = None,
    batch_size: Annotated[Optional[int], typer.Option("--batch-size", help="Examples per forward pass (default on a CPU: batches of up to 2,048 tokens, 128 examples at most; on a GPU 32 examples).")] = None,
    max_length: Annotated[int, typer.Option("--max-length", help="Tokens per example at inference.")] = 256,
    device: Annotated[str, typer.Option("--device", help="auto (cuda, mps, cpu), cpu, cuda, cuda:N or mps.")] = "auto",
    n: Annotated[int, typer.Option("--n", help="Examples for the memorization check.")] = 100,
    steps: Annotated[Optional[int], typer.Option("--steps", help="Steps of the memorization check.")] = None,
    lr: Annotated[float, typer.Option("--lr", help="Learning rate of the memorization check.")] = 1e-4,
    no_overfit: Annotated[bool, typer.Option("--no-overfit", help="Skip the memorization check.")] = False,
    cluster: Annotated[bool, typer.Option("--cluster", help="Also cluster the failures (slower).")] = False,
    embedder: Annotated[str, typer.Option("--embedder", help="minilm or none, for duplicate and shift checks.")] = "minilm",
    trust_remote_code: Annotated[bool, typer.Option("--trust-remote-code", help="Allow code shipped with the checkpoint to run.")] = False,
    seed: common.Seed = 0,
    overwrite: common.Overwrite = False,
) -> None:
    """Walk the debugging checklist and write doctor.md."""
    from rich.markup import escape

    from erroranalysis.data import DataOptions
    from erroranalysis.stages import InferParams, run_doctor

    out = out if out is not None else Path("runs") / f"{Path(model).resolve().name}-doctor"
    data_opts = DataOptions(text_column=text_column, label_column=label_column, id_column=id_column,
                            encoding=encoding, split=split)
    infer_opts = InferParams(batch_size=batch_size, max_length=max_length, device=device,
                             trust_remote_code=trust_remote_code)
    console = common.console()
    with console.status("doctor") as status:
        result = run_doctor(model, data, out, train=train, log=log, data_opts=data_opts, infer_opts=infer_opts,
                            n=n, steps=steps, lr=lr, overfit=not no_overfit, cluster=cluster, embedder=embedder,
                            seed=seed, overwrite=overwrite, progress=lambda m: status.update(f"doctor: {m}"))
    for i, section in enumerate(result.sections, 1):
        console.print(f"{i}. {section.title:<40} {MARK[section.status]}  {escape(section.summary)}", soft_wrap=True)
    console.print("\n[bold]What to look at next[/bold]")
    for i, step in enumerate(result.next_steps, 1):
        console.print(f"  {i}. {escape(step.replace('**', ''))}", soft_wrap=True)
    console.print(f"\nreport: {result.report}", soft_wrap=True, markup=False)
