"""`erroranalysis watch OUTPUT_DIR --data EVAL`: analyze each checkpoint a training run saves, as it lands."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from erroranalysis.cli import common
from erroranalysis.cli.compare import REGRESSION_EXIT
from erroranalysis.cli.run import Data, Encoding, IdColumn, LabelColumn, Split, TextColumn, data_options

INCOMPLETE_EXIT = 2  # --once: a checkpoint could not be analyzed (still incomplete, or it failed to load)


def register(app: typer.Typer) -> None:
    app.command("watch", help="Analyze each checkpoint-* folder of a training run's output folder as it lands "
                              "(only once its files are complete), into one run per step: RUNS_DIR/step-000500 "
                              "for checkpoint-500. --once analyzes the checkpoints present and exits (for "
                              "scripts and CI).")(watch)


@common.handle_errors
def watch(
    output_dir: Annotated[Path, typer.Argument(help="The Trainer's output_dir, where checkpoint-* folders appear.")],
    data: Data,
    out: Annotated[Optional[Path], typer.Option(
        "--out", "-o", help="Folder of the step runs (default: runs/<OUTPUT_DIR's name>).")] = None,
    once: Annotated[bool, typer.Option("--once", help="Analyze the checkpoints present, then exit.")] = False,
    task: Annotated[str, typer.Option("--task", help="classification or generation (a causal LM, with its output "
                                                     "checks).")] = "classification",
    text_column: TextColumn = "text",
    label_column: LabelColumn = "label",
    id_column: IdColumn = None,
    encoding: Encoding = "utf-8",
    split: Split = None,
    batch_size: Annotated[Optional[int], typer.Option("--batch-size", help="Examples per forward pass (default on a CPU: batches of up to 2,048 tokens in fp32 or 4,096 in bf16, 128 examples at most; on a GPU and for generation 32 examples).")] = None,
    max_length: Annotated[int, typer.Option("--max-length", help="Tokens per example.")] = 256,
    precision: Annotated[Optional[str], typer.Option(
        "--precision", help="fp32 or bf16 (default fp32); generation also auto (its default).")] = None,
    device: Annotated[str, typer.Option("--device", help="auto, cpu, cuda, cuda:N or mps.")] = "auto",
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", help="Generation: tokens per prompt.")] = 64,
    output_checks: Annotated[Optional[str], typer.Option(
        "--output-checks", help="Generation: comma-separated output checks (default: from the columns).")] = None,
    keep_hidden: Annotated[bool, typer.Option(
        "--keep-hidden", help="Keep each step's hidden states (float16); by default they are not kept.")] = False,
    reducer: Annotated[str, typer.Option("--reducer", help="umap, pca or none (kept across steps while it still "
                                                           "fits the failures).")] = "umap",
    no_cluster: Annotated[bool, typer.Option("--no-cluster", help="Skip failure clustering.")] = False,
    no_slices: Annotated[bool, typer.Option("--no-slices", help="Skip error slices.")] = False,
    taxonomy: Annotated[str, typer.Option(
        "--taxonomy", help="auto (the labeled taxonomy of the latest labeled step is applied to each new step), "
                           "none, or a taxonomy JSON file.")] = "auto",
    fail_on_regression: Annotated[bool, typer.Option(
        "--fail-on-regression", help="Compare each step with the previous one as 'compare --fail-on-regression' "
                                     "does; with --once, exit 3 when any step regressed.")] = False,
    alpha: Annotated[float, typer.Option("--alpha", help="Significance level of the regression gate.")] = 0.05,
    settle: Annotated[float, typer.Option(
        "--settle", help="Seconds a checkpoint without trainer_state.json must stay unchanged before it counts "
                         "as complete.")] = 10.0,
    interval: Annotated[float, typer.Option("--interval", help="Seconds between looks at OUTPUT_DIR.")] = 5.0,
    wait: Annotated[float, typer.Option(
        "--wait", help="With --once: seconds to wait for checkpoints still being written.")] = 600.0,
    seed: common.Seed = 0,
) -> None:
    """Analyze checkpoints as they land."""
    from erroranalysis import stages
    from erroranalysis.cli.run import _split
    from erroranalysis.infer.generation import GenerationParams
    from erroranalysis.integrations.watch import Watcher
    from erroranalysis.validation import check_choice, check_number

    check_choice("task", task, ("classification", "generation"))
    check_choice("reducer", reducer, ("umap", "pca", "none"))
    check_number("wait", wait, 0)
    after = stages.AfterParams.with_seed(seed, checks=False, slices=not no_slices, cluster=not no_cluster,
                                         cluster_params={"reducer": reducer, "layout": reducer})
    generating = task == "generation"
    infer = stages.InferParams(batch_size=batch_size, max_length=max_length, device=device,
                               precision="fp32" if generating else precision or "fp32")
    generation = GenerationParams(max_new_tokens=max_new_tokens, seed=seed, batch_size=batch_size or 32, device=device,
                                   precision=(precision or "auto") if generating else "auto",
                                   output_checks=_split(output_checks) or None)
    console = common.console()
    say = lambda text: console.print(text, markup=False, highlight=False)  # noqa: E731
    watcher = Watcher(output_dir, data, runs=out, data_opts=data_options(text_column, label_column, id_column,
                                                                          encoding, split),
                      task=task, infer=infer, generation=generation, after=after, keep_hidden=keep_hidden,
                      taxonomy=None if taxonomy == "none" else taxonomy, settle=settle, poll=interval,
                      gate=fail_on_regression, alpha=alpha, say=say)
    say(f"watching {output_dir} -> {watcher.runs}" + (" (once)" if once else " (Ctrl-C to stop)"))
    if not once:
        watcher.forever()
        return
    outcomes, pending = watcher.once(wait=wait)
    say(f"{sum(o.run is not None for o in outcomes)} checkpoint(s) analyzed; the timeline: "
        f"erroranalysis timeline {watcher.runs}")
    names = [o.checkpoint.name for o in outcomes if o.error] + sorted(pending)
    regressed = [o for o in outcomes if o.regressions]
    if names:
        common.fail(f"{len(names)} checkpoint(s) not analyzed ({', '.join(names)}): still incomplete or unreadable; "
                    "run watch again when they are complete.", INCOMPLETE_EXIT)
    if regressed:
        n = sum(len(o.regressions) for o in regressed)
        print(f"regression: {n} significant regression(s) in {', '.join(o.run.name for o in regressed)}; "
              f"exit {REGRESSION_EXIT}", file=sys.stderr)
        raise typer.Exit(REGRESSION_EXIT)
