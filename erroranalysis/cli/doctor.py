"""`erroranalysis doctor --model DIR --data FILE`: the whole debugging checklist, one Markdown report."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated, Optional

import typer

from erroranalysis.checklist.memorize import OverfitParams
from erroranalysis.cli import common, options
from erroranalysis.cli import stage_groups as groups

MARK = {"problem": "[bold red]PROBLEM[/]", "warning": "[yellow]WARNING[/]", "ok": "[green]OK[/]",
        "skipped": "[dim]skipped[/]"}


def register(app: typer.Typer) -> None:
    app.command("doctor", help="Run the debugging checklist in order (memorize, training loss, validation loss, "
                               "which classes fail, which examples fail, labels or data wrong) and write one "
                               "report, doctor.md, in the run directory.")(doctor)


OVERFIT = options.Group("overfit", OverfitParams, exclude=("batch_size", "max_length", "lora"), panel="Memorization check",
                        switch="--overfit/--no-overfit", switch_help="Check that the model can memorize a few examples.")
CHECKS = options.Group("checks", groups.CHECKS.params, panel="Data checks")
CLUSTER = replace(groups.CLUSTER, on=False, switch_help="Also cluster the failures (slower).")


@common.handle_errors
@options.takes(groups.DATA, groups.INFER, groups.GENERATION_GROUP, OVERFIT, CHECKS, CLUSTER)
def doctor(
    model: Annotated[Path, typer.Option("--model", "-m", help="Checkpoint folder (config.json + model.safetensors); "
                                        "with --task generation a causal LM folder or a .gguf file.")],
    data: Annotated[str, typer.Option("--data", "-d", help="Eval set: .jsonl, .csv, .parquet or a save_to_disk folder "
                                      "(--task generation: the prompt set); or an s3://, gs://, az:// URL of a file.")],
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Run directory to write (default: "
                                                "runs/<checkpoint name>-doctor).")] = None,
    log: Annotated[Optional[Path], typer.Option("--log", help="Training log: trainer_state.json, TensorBoard "
                                                "events or a CSV/JSONL log (default: found in the checkpoint).")] = None,
    task: Annotated[str, typer.Option("--task", help="classification (a sequence classifier) or generation (a "
                                      "causal LM: memorize the --train SFT rows, a generation run over --data, "
                                      "contamination against --train).")] = "classification",
    overwrite: common.Overwrite = False,
    as_json: common.Json = False,
    *, data_options, infer, generation, overfit, checks, cluster,
) -> None:
    """Walk the debugging checklist and write doctor.md."""
    from rich.markup import escape

    from erroranalysis.core.progress import reporter
    from erroranalysis.core.validation import check_choice
    from erroranalysis.stages import run_doctor, run_doctor_generation

    check_choice("--task", task, ("classification", "generation"))
    out = out if out is not None else Path("runs") / f"{Path(model).resolve().name}-doctor"
    notes = reporter()
    if task == "generation":
        result = run_doctor_generation(model, data, out, log=log, data_opts=data_options, gen_opts=generation,
                                       overfit=overfit, checks=checks, seed=checks.seed, overwrite=overwrite,
                                       progress=lambda m: notes.note(f"doctor: {m}"))
    else:
        result = run_doctor(model, data, out, log=log, data_opts=data_options, infer_opts=infer, overfit=overfit,
                            checks=checks, cluster=cluster, seed=checks.seed, overwrite=overwrite,
                            progress=lambda m: notes.note(f"doctor: {m}"))
    if as_json:
        common.print_json(result.to_dict())
        return
    console = common.console()
    for i, section in enumerate(result.sections, 1):
        console.print(f"{i}. {section.title:<40} {MARK[section.status]}  {escape(section.summary)}", soft_wrap=True)
    console.print("\n[bold]What to look at next[/bold]")
    for i, step in enumerate(result.next_steps, 1):
        console.print(f"  {i}. {escape(step.replace('**', ''))}", soft_wrap=True)
    console.print(f"\nreport: {result.report}", soft_wrap=True, markup=False)
