"""`erroranalysis run`: a checkpoint over an eval set, then metrics, data checks, slices and failure clusters.

Every option but the model, the eval set, the output and the task comes from a stage's parameter declarations
(`erroranalysis.cli.stage_groups`), so each stage parameter is set here as from the stage's own command."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from erroranalysis.cli import common, options
from erroranalysis.cli import stage_groups as groups
from erroranalysis.tasks import CHOICES, headline

Model = Annotated[Path, typer.Option("--model", "-m", help="Checkpoint folder (config.json + model.safetensors), or "
                                                          "a .gguf file for --task generation.")]
Data = Annotated[str, typer.Option("--data", "-d", help="Eval set: .jsonl, .csv, .parquet or a save_to_disk folder; "
                                                        "or an s3://, gs://, az:// URL of a file (docs/scale.md).")]
TASKS = CHOICES  # auto reads the head from the checkpoint's config.json (erroranalysis.tasks)
GENERATION = replace(groups.GENERATION_GROUP, deprecated={"--checks": "output_checks", "--labels": "labels"})
CHECKS = replace(groups.CHECKS, deprecated_off="--no-checks")


def summary(run) -> dict:
    """What `run` and `analyze` print, and print as JSON: where the run is, its headline metrics, its stages."""
    from erroranalysis.metrics.headline import headline

    metrics = run.metrics()
    return {"run": run.location, "task": run.task, "headline": headline(run.task, metrics["overall"]),
            "overall": metrics["overall"],
            "output_checks": metrics.get("output_checks"),
            "stages": {name: {"status": s["status"], "seconds": s.get("seconds")}
                       for name, s in run.manifest["stages"].items()}}


def report(run, as_json: bool = False) -> None:
    """Where the results are, and the headline numbers."""
    from rich.markup import escape

    facts = summary(run)
    if as_json:
        common.print_json(facts)
        return
    overall = facts["overall"]
    out = common.console()
    checks = facts["output_checks"]
    if checks:  # a generation run: its pass rates, not the accuracy of the made-up pass/fail label
        from erroranalysis.cli.show_generation import pct

        out.print(f"[bold]{escape(run.location)}[/bold]: {overall['n']} examples, passed every check "
                  f"{pct(checks.get('pass_rate'))}, {overall['n_failures']} failures")
        out.print("output checks: " + ", ".join(f"{c['check']} {pct(c['pass_rate'])}" for c in checks["per_check"])
                  + (f"; unparseable {checks.get('unparseable')}" if checks.get("label_column") else "")
                  + f"; low loss but failing {(checks.get('loss') or {}).get('low_loss_failures')}", markup=False)
    else:
        out.print(f"[bold]{escape(run.location)}[/bold]: {overall['n']} examples, {headline(run.task, overall)}, "
                  f"{overall['n_failures']} failures")
    out.print("stages: " + ", ".join(f"{name} {s['status']} ({s['seconds'] or 0:.1f}s)"
                                     for name, s in facts["stages"].items()), markup=False)
    if run.remote:
        out.print(f"published to {run.remote} (manifest last, docs/scale.md); the local copy: {run.path}",
                  markup=False)
    out.print(f"see it: erroranalysis show {run.path}   |   browse it: erroranalysis ui {run.path.parent}", markup=False)


def log_to(trackers, path) -> None:
    """--log-to: the run sent to each tracker named (after it is written; stdout stays the run's report)."""
    if trackers.log_to:
        import sys

        from erroranalysis.integrations import trackers as tracking

        print(f"logged to {'; '.join(tracking.log_run(path, trackers))}", file=sys.stderr)


def register(app: typer.Typer) -> None:
    @app.command("run")
    @common.handle_errors
    @options.takes(groups.DATA, groups.INFER, groups.TASK, GENERATION, groups.TOKENS, groups.ENGINE, groups.METRICS,
                   CHECKS, groups.SLICES, groups.CLUSTER, groups.TRACKERS)
    def run_command(
        model: Model,
        data: Data,
        out: common.OutDir,
        task: Annotated[str, typer.Option("--task", help="auto (read the head from the checkpoint's config.json: "
                                                         "architectures, problem_type, num_labels), classification, "
                                                         "multilabel, regression, token-classification (NER, POS), "
                                                         "or generation (a causal LM, a .gguf, or a seq2seq LM: "
                                                         "T5, BART).",
                                          metavar="|".join(TASKS))] = "auto",
        overwrite: common.Overwrite = False,
        as_json: common.Json = False,
        *, data_options, infer, task_options, generation, tokens, engine, metrics, checks, slices, cluster,
        trackers,
    ) -> None:
        """Run a checkpoint over an eval set: predictions, metrics, data checks, error slices and failure clusters."""
        from erroranalysis import stages
        from erroranalysis.core.progress import reporter
        from erroranalysis.core.validation import check_param

        check_param("--task", task, task in TASKS, " or ".join(TASKS))
        trackers.require()
        task = stages.resolve_task(model, task)
        after = groups.after(metrics, checks, slices, cluster)
        progress = reporter()
        setup = stages.Setup(data=data_options, infer=infer, task=task_options, generation=generation, tokens=tokens)
        result = stages.run_model(task, model, data, out, setup, after=after, overwrite=overwrite, progress=progress,
                                  engine=engine, log=progress.note)
        report(result, as_json)
        log_to(trackers, result.path)
