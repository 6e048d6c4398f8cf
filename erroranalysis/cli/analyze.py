"""`erroranalysis analyze`: bring your own predictions (vLLM, an API, another framework), or with
`--task generation` your own generations (a table, lm-evaluation-harness samples, an Inspect log, chat JSONL)."""

from __future__ import annotations

from typing import Annotated

import typer

from erroranalysis import tasks
from erroranalysis.cli import common, options
from erroranalysis.cli import stage_groups as groups
from erroranalysis.cli.run import CHECKS, log_to, report

TASKS = tuple(name for name, task in tasks.TASKS.items() if task.loader)  # what the registry can read


def register(app: typer.Typer) -> None:
    @app.command("analyze")
    @common.handle_errors
    @options.takes(groups.DATA, groups.OUTPUTS, groups.TASK, groups.SOURCE, groups.OUTPUT_CHECKS,
                   groups.TOKEN_READING, groups.ENGINE, groups.METRICS, CHECKS, groups.SLICES, groups.CLUSTER,
                   groups.TRACKERS)
    def analyze_command(
        predictions: Annotated[str, typer.Option(
            "--predictions", "-p", help="File (or s3://, gs://, az:// URL) with text, label, pred and optional prob_<label> "
                                        "columns or a probs/scores/logits column; with --task "
                                        "generation: prompts and outputs (see --source-format).")],
        out: common.OutDir,
        task: Annotated[str, typer.Option("--task", help="classification (predicted labels), multilabel (predicted "
                                                         "label sets or prob_<label> sigmoids), regression "
                                                         "(predicted values), generation (outputs of an LLM, "
                                                         "checked and scored) or token-classification (predicted "
                                                         "tags per word, --pred-column pred_tags).",
                                          metavar="|".join(TASKS))] = "classification",
        pred_column: Annotated[str | None, typer.Option(
            "--pred-column", help="Column holding the predictions.",
            show_default="pred; pred_tags for token-classification")] = None,
        overwrite: common.Overwrite = False,
        as_json: common.Json = False,
        *, data_options, outputs, task_options, source, generation, tokens, engine, metrics, checks, slices,
        cluster, trackers,
    ) -> None:
        """Analyze predictions made elsewhere: metrics, data checks, slices and failure clusters, in a run."""
        from erroranalysis import stages
        from erroranalysis.core.progress import reporter
        from erroranalysis.core.validation import check_choice

        check_choice("--task", task, TASKS)
        trackers.require()
        after = groups.after(metrics, checks, slices, cluster)
        reading = stages.Reading(data=data_options, task=task_options, source=source, generation=generation,
                                 tokens=tokens, output=outputs, pred_column=pred_column)
        run = stages.analyze(task, predictions, out, reading, after=after, overwrite=overwrite, progress=reporter(),
                             engine=engine)
        report(run, as_json)
        log_to(trackers, run.path)
