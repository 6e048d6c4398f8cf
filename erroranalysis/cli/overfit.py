"""`erroranalysis overfit --model DIR --data FILE`: can the checkpoint memorize ~100 examples?"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from erroranalysis.cli import common

STYLES = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def register(app: typer.Typer) -> None:
    app.command("overfit", help="Fine-tune an in-memory copy of the checkpoint on a few examples and report whether "
                                "it memorizes them (loss ~0, accuracy ~100%), with likely causes when it does "
                                "not: frozen weights, learning rate, shuffled labels, truncation.")(overfit)


@common.handle_errors
def overfit(
    model: Annotated[Path, typer.Option("--model", "-m", help="Checkpoint folder (config.json + model.safetensors).")],
    data: Annotated[Path, typer.Option("--data", "-d", help="Examples: .jsonl, .csv, .parquet or a save_to_disk folder.")],
    n: Annotated[int, typer.Option("--n", help="Examples to memorize (a seeded random sample).")] = 100,
    steps: Annotated[Optional[int], typer.Option("--steps", help="Optimizer steps (default: 20 epochs over the n examples).")] = None,
    lr: Annotated[float, typer.Option("--lr", help="AdamW learning rate.")] = 1e-4,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Examples per step.")] = 16,
    max_length: Annotated[int, typer.Option("--max-length", help="Tokens per example; longer texts are cut.")] = 64,
    freeze: Annotated[Optional[str], typer.Option("--freeze", help="Regex of parameter names to freeze, to mirror a "
                                                  "training setup that freezes them (e.g. '^bert\\.').")] = None,
    no_control: Annotated[bool, typer.Option("--no-control", help="Skip the control run on permuted labels (halves "
                                             "the time; loses the shuffled-labels check).")] = False,
    text_column: Annotated[str, typer.Option("--text-column", help="Column holding the input text.")] = "text",
    label_column: Annotated[str, typer.Option("--label-column", help="Column holding the gold label.")] = "label",
    encoding: Annotated[str, typer.Option("--encoding", help="Text encoding of CSV/JSONL files.")] = "utf-8",
    split: Annotated[Optional[str], typer.Option("--split", help="Split of a saved DatasetDict.")] = None,
    device: Annotated[str, typer.Option("--device", help="auto (cuda, mps, cpu), cpu, cuda, cuda:N or mps.")] = "auto",
    trust_remote_code: Annotated[bool, typer.Option("--trust-remote-code", help="Allow code shipped with the checkpoint to run.")] = False,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Also write the result (curves included) as JSON here.")] = None,
    seed: common.Seed = 0,
) -> None:
    """Can the model memorize a tiny dataset?"""
    from erroranalysis import files
    from erroranalysis.checklist.overfit import overfit_check
    from erroranalysis.validation import check_param

    if json_out is not None:
        check_param("--json", str(json_out), not json_out.is_dir(), "a file path, not a folder")
    bar, advance = _progress()
    try:
        result = overfit_check(model, data, n=n, steps=steps, lr=lr, batch_size=batch_size, max_length=max_length,
                               seed=seed, control=not no_control, freeze=freeze, device=device,
                               text_column=text_column, label_column=label_column, encoding=encoding, split=split,
                               trust_remote_code=trust_remote_code, progress=advance)
    finally:
        if bar.live.is_started:
            bar.stop()
    if json_out is not None:
        files.write_json(json_out, result.to_dict())
    print_result(result)
    if json_out is not None:
        typer.echo(f"wrote {json_out}")


def _progress():
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    bar = Progress(TextColumn("training"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), transient=True)
    task = bar.add_task("training", total=None)

    def advance(done: int, total: int) -> None:
        if not bar.live.is_started:  # started at the first step, so input errors print alone
            bar.start()
        bar.update(task, completed=done, total=total)

    return bar, advance


def print_result(result) -> None:
    from rich.markup import escape

    from erroranalysis.checklist.overfit_diagnosis import ascii_curve

    out = common.console()
    c = result.curve
    verdict = "[green]memorized[/green]" if result.memorized else "[bold red]did not memorize[/bold red]"
    out.print(f"[bold]{escape(result.model)}[/bold] on {result.n} examples of {escape(result.data)}: {verdict} "
              f"({result.steps_run} steps, lr {result.lr:g}, batch {result.batch_size}, max_length {result.max_length})",
              soft_wrap=True)
    out.print(f"  loss      {c.initial_loss:.4g} -> {c.final_loss:.4g}   {ascii_curve(c.eval_loss)}")
    out.print(f"  accuracy  {c.eval_accuracy[0]:.0%} -> {c.final_accuracy:.0%}   {ascii_curve(c.eval_accuracy)}")
    if result.control is not None:
        k = result.control
        out.print(f"  control (permuted labels): loss {k.initial_loss:.4g} -> {k.final_loss:.4g}, accuracy "
                  f"{k.final_accuracy:.0%}   {ascii_curve(k.eval_loss)}")
    p = result.params
    out.print(f"  parameters: {p['trainable']:,} of {p['total']:,} trainable; inputs: "
              f"{result.inputs['mean_tokens']:.0f} tokens on average, {result.inputs['truncated_share']:.0%} cut")
    for f in result.findings:
        if f.check == "memorized":
            continue
        out.print(f"\n[{STYLES[f.severity]}]{f.severity.upper()}[/] {escape(f.message)}.", soft_wrap=True)
        out.print(f"  what to do: {escape(f.advice)}", soft_wrap=True)
