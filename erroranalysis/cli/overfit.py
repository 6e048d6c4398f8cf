"""`erroranalysis overfit --model DIR --data FILE`: can the checkpoint memorize ~100 examples? With `--task
generation`: can a causal LM memorize a few SFT answers, loss on the answer only?"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from erroranalysis.checklist.memorize import OverfitParams
from erroranalysis.cli import common, options
from erroranalysis.cli import stage_groups as groups

STYLES = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def register(app: typer.Typer) -> None:
    app.command("overfit", help="Fine-tune an in-memory copy of the checkpoint on a few examples and report whether "
                                "it memorizes them (loss ~0, accuracy ~100%), with likely causes when it does "
                                "not: frozen weights, learning rate, shuffled labels, truncation. With --task "
                                "generation: a causal LM on SFT rows, loss on the answer only, and whether greedy "
                                "decoding reproduces each answer.")(overfit)


OVERFIT = options.Group("overfit", OverfitParams)
DATA = options.Group("data_options", groups.DATA.params, exclude=("id_column",), panel="Examples")


@common.handle_errors
@options.takes(OVERFIT, DATA)
def overfit(
    model: Annotated[Path, typer.Option("--model", "-m", help="Checkpoint folder (config.json + model.safetensors); "
                                        "with --task generation also a .gguf file.")],
    data: Annotated[str, typer.Option("--data", "-d", help="Examples: .jsonl, .csv, .parquet or a save_to_disk folder "
                                      "(--task generation: SFT rows, messages or prompt/completion, optionally "
                                      "input_ids/labels as your pipeline tokenized them); or an s3://, gs://, az:// "
                                      "URL of a file.")],
    task: Annotated[str, typer.Option("--task", help="classification (a checkpoint with a classification head, "
                                      "examples with a label column) or generation (a causal LM folder or .gguf "
                                      "file, SFT rows, loss on the answer only).")] = "classification",
    as_json: common.Json = False,
    json_out: common.JsonOut = None,
    *, overfit, data_options,
) -> None:
    """Can the model memorize a tiny dataset?"""
    from erroranalysis.checklist.memorize import TASKS
    from erroranalysis.checklist.overfit import overfit_check
    from erroranalysis.core.progress import reporter
    from erroranalysis.core.validation import check_choice

    check_choice("--task", task, TASKS)
    common.check_json_out(json_out)
    phases = reporter().phases("overfit")
    result = overfit_check(model, data, overfit, data_opts=data_options, task=task,
                           progress=lambda done, total: phases("training", done, total))
    phases("", 0, 0)
    common.write_json_out(json_out, result.to_dict())
    if as_json:
        common.print_json(result.to_dict())
        return
    if getattr(result, "task", "classification") == "generation":
        print_lm_result(result)
    else:
        print_result(result)
    if json_out is not None:
        typer.echo(f"wrote {json_out}")


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


def print_lm_result(result) -> None:
    from rich.markup import escape

    from erroranalysis.checklist.overfit_diagnosis import ascii_curve

    out = common.console()
    c = result.curve
    verdict = "[green]memorized[/green]" if result.memorized else "[bold red]did not memorize[/bold red]"
    reproduced = sum(e["reproduced"] for e in result.examples)
    out.print(f"[bold]{escape(result.model)}[/bold] on {result.n} SFT examples of {escape(result.data)}: {verdict} "
              f"({result.steps_run} steps, lr {result.lr:g}, batch {result.batch_size}, max_length {result.max_length}"
              f", {'LoRA' if result.lora else 'all weights'}, loss on {result.masking})", soft_wrap=True)
    out.print(f"  answer loss  {c.initial_loss:.4g} -> {c.final_loss:.4g}   {ascii_curve(c.eval_loss)}")
    out.print(f"  greedy decoding reproduced {reproduced} of {result.n} answers exactly", soft_wrap=True)
    if result.control is not None:
        k = result.control
        out.print(f"  control (answers shuffled across prompts): answer loss {k.initial_loss:.4g} -> "
                  f"{k.final_loss:.4g}   {ascii_curve(k.eval_loss)}")
    p = result.params
    out.print(f"  parameters: {p['trainable']:,} of {p['total']:,} trainable; {result.inputs['trained_tokens']:,} "
              f"trained tokens, {result.inputs['mean_prompt_tokens']:.0f} prompt and "
              f"{result.inputs['mean_answer_tokens']:.0f} answer tokens on average")
    missed = [e for e in result.examples if not e["reproduced"]][:3]
    for e in missed:
        out.print(f"  row {e['row']}: wanted {escape(repr(e['answer'][:60]))}, wrote {escape(repr(e['output'][:60]))} "
                  f"(loss {e['final_loss']:.3g})", soft_wrap=True)
    for f in result.findings:
        if f.check == "memorized":
            continue
        out.print(f"\n[{STYLES[f.severity]}]{f.severity.upper()}[/] {escape(f.message)}.", soft_wrap=True)
        out.print(f"  what to do: {escape(f.advice)}", soft_wrap=True)
