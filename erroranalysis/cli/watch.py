"""`erroranalysis watch OUTPUT_DIR --data EVAL`: analyze each checkpoint a training run saves, as it lands."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Optional

import typer

from erroranalysis.cli import common, options
from erroranalysis.cli import stage_groups as groups
from erroranalysis.cli.compare import REGRESSION_EXIT
from erroranalysis.cli.run import Data
from erroranalysis.compare.params import CompareParams

INCOMPLETE_EXIT = 2  # --once: a checkpoint could not be analyzed (still incomplete, or it failed to load)


def register(app: typer.Typer) -> None:
    app.command("watch", help="Analyze each checkpoint-* folder of a training run's output folder as it lands "
                              "(only once its files are complete), into one run per step: RUNS_DIR/step-000500 "
                              "for checkpoint-500. --once analyzes the checkpoints present and exits (for "
                              "scripts and CI).")(watch)


INFER = options.Group("infer", groups.INFER.params, exclude=("hidden",), panel="Inference")
CHECKS = replace(groups.CHECKS, on=False)  # each step's data checks are off unless asked for
GATE = options.Group("gate", CompareParams, exclude=("n_resamples", "level", "min_overlap"), panel="Regression gate")


@common.handle_errors
@options.takes(groups.DATA, INFER, groups.GENERATION_GROUP, groups.METRICS, CHECKS, groups.SLICES, groups.CLUSTER,
               GATE, groups.TRACKERS)
def watch(
    output_dir: Annotated[Path, typer.Argument(help="The Trainer's output_dir, where checkpoint-* folders appear.")],
    data: Data,
    out: Annotated[Optional[Path], typer.Option(
        "--out", "-o", help="Folder of the step runs (default: runs/<OUTPUT_DIR's name>).")] = None,
    once: Annotated[bool, typer.Option("--once", help="Analyze the checkpoints present, then exit.")] = False,
    task: Annotated[str, typer.Option("--task", help="classification or generation (a causal LM, with its output "
                                                     "checks).")] = "classification",
    keep_hidden: Annotated[bool, typer.Option(
        "--keep-hidden", help="Keep each step's hidden states (float16); by default they are not kept.")] = False,
    taxonomy: Annotated[str, typer.Option(
        "--taxonomy", help="auto (the labeled taxonomy of the latest labeled step is applied to each new step), "
                           "none, or a taxonomy JSON file.")] = "auto",
    fail_on_regression: Annotated[bool, typer.Option(
        "--fail-on-regression", help="Compare each step with the previous one as 'compare --fail-on-regression' "
                                     "does; with --once, exit 3 when any step regressed.")] = False,
    settle: Annotated[float, typer.Option(
        "--settle", help="Seconds a checkpoint without trainer_state.json must stay unchanged before it counts "
                         "as complete.")] = 10.0,
    interval: Annotated[float, typer.Option("--interval", help="Seconds between looks at OUTPUT_DIR.")] = 5.0,
    wait: Annotated[float, typer.Option(
        "--wait", help="With --once: seconds to wait for checkpoints still being written.")] = 600.0,
    as_json: Annotated[bool, typer.Option("--json", help="With --once: print what was analyzed as JSON on stdout "
                                                         "(the running commentary goes to stderr).")] = False,
    *, data_options, infer, generation, metrics, checks, slices, cluster, gate, trackers,
) -> None:
    """Analyze checkpoints as they land."""
    from erroranalysis.core.validation import check_choice, check_number
    from erroranalysis.integrations.trackers import StepLogger
    from erroranalysis.integrations.watch import Watcher

    trackers.require()
    check_choice("--task", task, ("classification", "generation"))
    check_number("--wait", wait, 0)
    console = common.console()
    if as_json:
        console.stderr = True
    say = lambda text: console.print(text, markup=False, highlight=False)  # noqa: E731
    after = groups.after(metrics, checks, slices, cluster)
    watcher = Watcher(output_dir, data, runs=out, data_opts=data_options,
                      task=task, infer=infer, generation=generation, after=after, keep_hidden=keep_hidden,
                      taxonomy=None if taxonomy == "none" else taxonomy, settle=settle, poll=interval,
                      gate=fail_on_regression, alpha=gate.alpha, say=say)
    logger = watcher.on_step = StepLogger(trackers, watcher.runs)
    say(f"watching {output_dir} -> {watcher.runs}" + (" (once)" if once else " (Ctrl-C to stop)"))
    try:
        if not once:
            watcher.forever()
            return
        outcomes, pending = watcher.once(wait=wait)
    finally:
        logger.close()
    say(f"{sum(o.run is not None for o in outcomes)} checkpoint(s) analyzed; the timeline: "
        f"erroranalysis timeline {watcher.runs}")
    names = [o.checkpoint.name for o in outcomes if o.error] + sorted(pending)
    regressed = [o for o in outcomes if o.regressions]
    if as_json:
        common.print_json({"runs": str(watcher.runs),
                           "analyzed": [str(o.run) for o in outcomes if o.run is not None],
                           "not_analyzed": names, "regressed": [o.run.name for o in regressed]})
    if names:
        common.fail(f"{len(names)} checkpoint(s) not analyzed ({', '.join(names)}): still incomplete or unreadable; "
                    "run watch again when they are complete.", INCOMPLETE_EXIT)
    if regressed:
        n = sum(len(o.regressions) for o in regressed)
        print(f"regression: {n} significant regression(s) in {', '.join(o.run.name for o in regressed)}; "
              f"exit {REGRESSION_EXIT}", file=sys.stderr)
        raise typer.Exit(REGRESSION_EXIT)
