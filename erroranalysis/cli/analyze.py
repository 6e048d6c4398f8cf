"""`erroranalysis analyze`: bring your own predictions (vLLM, an API, another framework), or with
`--task generation` your own generations (a table, lm-evaluation-harness samples, an Inspect log, chat JSONL)."""

from __future__ import annotations

from typing import Annotated

import typer

from erroranalysis.cli import common, options
from erroranalysis.cli import stage_groups as groups
from erroranalysis.cli.run import CHECKS, log_to, report

TASKS = ("classification", "multilabel", "regression", "generation", "token-classification")


def register(app: typer.Typer) -> None:
    @app.command("analyze")
    @common.handle_errors
    @options.takes(groups.DATA, groups.TASK, groups.SOURCE, groups.OUTPUT_CHECKS, groups.TOKEN_READING, groups.ENGINE,
                   groups.METRICS, CHECKS, groups.SLICES, groups.CLUSTER, groups.TRACKERS)
    def analyze_command(
        predictions: Annotated[str, typer.Option(
            "--predictions", "-p", help="File (or s3://, gs://, az:// URL) with text, label, pred and optional prob_<label> "
                                        "columns; with --task "
                                        "generation: prompts and outputs (see --source-format).")],
        out: common.OutDir,
        task: Annotated[str, typer.Option("--task", help="classification (predicted labels), multilabel (predicted "
                                                         "label sets or prob_<label> sigmoids), regression "
                                                         "(predicted values), generation (outputs of an LLM, "
                                                         "checked and scored) or token-classification (predicted "
                                                         "tags per word, --pred-column pred_tags).",
                                          metavar="|".join(TASKS))] = "classification",
        pred_column: Annotated[str, typer.Option("--pred-column", help="Column holding the predicted label.")] = "pred",
        overwrite: common.Overwrite = False,
        as_json: common.Json = False,
        *, data_options, task_options, source, generation, tokens, engine, metrics, checks, slices, cluster,
        trackers,
    ) -> None:
        """Analyze predictions made elsewhere: metrics, data checks, slices and failure clusters, in a run."""
        from erroranalysis import stages
        from erroranalysis.core.progress import reporter
        from erroranalysis.core.validation import check_choice

        check_choice("--task", task, TASKS)
        trackers.require()
        after = groups.after(metrics, checks, slices, cluster)
        if task == "generation":
            run = stages.analyze_generations(predictions, out, data_opts=data_options, gen_opts=generation,
                                             source=source, after=after, overwrite=overwrite, progress=reporter(),
                                             engine=engine)
        elif task == "token-classification":
            progress = reporter()
            run = stages.analyze_token_predictions(
                predictions, out, data_opts=data_options, token_opts=tokens,
                pred_column="pred_tags" if pred_column == "pred" else pred_column, after=after, overwrite=overwrite,
                progress=progress, log=progress.note)
        elif task in ("multilabel", "regression"):
            run = stages.analyze_task_predictions(predictions, out, task=task, data_opts=data_options,
                                                  task_opts=task_options, pred_column=pred_column, after=after,
                                                  overwrite=overwrite, progress=reporter(), engine=engine)
        else:
            run = stages.analyze_predictions(predictions, out, data_opts=data_options, pred_column=pred_column,
                                             after=after, overwrite=overwrite, progress=reporter(), engine=engine)
        report(run, as_json)
        log_to(trackers, run.path)
