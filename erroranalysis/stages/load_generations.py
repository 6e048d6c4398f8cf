"""`erroranalysis analyze --task generation`: outputs an LLM wrote elsewhere (vLLM, SGLang, lm-evaluation-harness,
Inspect, an API), checked and scored as a generation run made here, then the usual stages.

The file is read by its format's reader (`erroranalysis.sources.generations`), then validated, checked and tabled by the
generation stage's own code (`generate.prepare_eval_set`, `output_checks`, `generate.prediction_table`), so a run
from imported outputs has the columns, metrics and downstream stages of one made by `run --task generation`;
there is no model, so the losses are NaN. Everything is checked before the run directory is created.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from erroranalysis import rundir
from erroranalysis.core.errors import DataError, preview, where
from erroranalysis.infer.generation import GenerationParams
from erroranalysis.rundir import Run, create_run
from erroranalysis.sources.generations import SourceParams, read_generations
from erroranalysis.sources.table import DataOptions, InMemory, as_source
from erroranalysis.stages.after import AfterParams, after_predictions
from erroranalysis.stages.generate import prediction_table, prepare_eval_set

UNKNOWN_STOP = "unknown"  # a file that does not say why generation stopped
GIVEN = ("stop_reason", "n_output_tokens")  # what a file may say about each generation, kept as the run's columns


def analyze_generations(data: str | Path | InMemory, out: str | Path, *, data_opts: DataOptions = DataOptions(),
                        gen_opts: GenerationParams = GenerationParams(), source: SourceParams = SourceParams(),
                        after: AfterParams = AfterParams(), overwrite: bool = False, embedder=None, progress=None,
                        engine=None) -> Run:
    """Check and score the outputs in `data` (a table, an lm-eval samples file, an Inspect log, chat JSONL; see
    `erroranalysis.sources.generations`), write the run at `out`, then metrics and the stages `after` names."""
    prepared = prepare_generations(data, data_opts, gen_opts, source)
    if engine is not None and engine.distributed:
        from erroranalysis.engines import ray_data

        ray_data.connect(engine)  # fail before the run directory exists when Ray is missing or unreachable
    manifest = {"task": "generation", "labels": prepared["labels"], "seed": after.seed,
                "data": {**prepared["data_entry"], "source_format": prepared["source_format"]},
                "generation": {"source": prepared["source_format"], "output_checks": prepared["checks"],
                               "allowed_labels": prepared["allowed"], "extra_labels": list(gen_opts.labels),
                               "regex": gen_opts.regex, **prepared["scoring"].record(),
                               "judge": prepared["given"].get("score"), "pass_threshold": source.pass_threshold}}
    params = {**source.record(), "output_checks": prepared["checks"]}
    with create_run(out, overwrite=overwrite, **manifest) as run:
        with run.stage("load_predictions", params) as staging:
            staging.write_parquet(rundir.PREDICTIONS, imported_table(prepared))
        after_predictions(run, after, embedder=embedder, progress=progress, engine=engine)
    return run


def prepare_generations(data, data_opts: DataOptions, gen_opts: GenerationParams, source: SourceParams) -> dict:
    """The file read and validated as a prompt set with its outputs (what `prediction_table` needs)."""
    data = as_source(data)
    frame, fmt = read_generations(data, source, encoding=data_opts.encoding, split=data_opts.split)
    columns = [c for c in frame.columns if c != "_line"]
    if source.output_column not in columns:
        raise DataError(f"{data}: no output column {source.output_column!r}; columns found: {preview(columns)}; "
                        "name it with --output-column.")
    judge = source.judge_column(columns, frame.attrs.get("judge"))
    if judge is not None and judge not in columns:
        raise DataError(f"{data}: no score column {judge!r}; columns found: {preview(columns)}; fix --score-column.")
    given = {"output": source.output_column, **({"score": judge} if judge else {}),
             **{c: c for c in GIVEN if c in columns}}
    if fmt != "table" and data_opts.id_column is None and "example_id" in columns:
        data_opts = data_opts.replace(id_column="example_id")  # the reader's ids (a doc id, a sample id)
    prepared = prepare_eval_set(data, data_opts, gen_opts, table=(frame, fmt), given=given,
                                pass_threshold=source.pass_threshold)
    prepared["outputs"] = _outputs(prepared, source.output_column)
    prepared["source_format"] = fmt
    return prepared


def _outputs(prepared: dict, column: str) -> list[str]:
    values = prepared["eval_set"].frame[column].to_numpy(dtype=object)
    outputs = []
    for i, value in enumerate(values):
        if value is None or (isinstance(value, float) and np.isnan(value)):
            outputs.append("")  # no output is an empty answer: the checks say how it fails
        elif isinstance(value, str):
            outputs.append(value)
        else:
            raise DataError(f"{where(prepared['source'], int(prepared['lines'][i]), column)}: holds a "
                            f"{type(value).__name__}, not text; the output column must hold the model's text.")
    return outputs


def imported_table(prepared: dict):
    """predictions.parquet from the outputs given: the generation run's table, losses NaN (no model here)."""
    frame = prepared["eval_set"].frame
    n = len(frame)
    outputs = prepared["outputs"]
    stop = frame["stop_reason"].astype(str).tolist() if "stop_reason" in frame.columns else [UNKNOWN_STOP] * n
    counts = _counts(frame, "n_output_tokens", outputs)
    result = {"output": outputs, "stop_reason": stop, "output_loss": np.full(n, np.nan, dtype=np.float32),
              "reference_loss": np.full(n, np.nan, dtype=np.float32), "n_output_tokens": counts}
    n_tokens = [len(str(p).split()) for p in prepared["prompts"]]
    return prediction_table(prepared, result, n_tokens, frame["_cut"].to_numpy(dtype=bool))


def _counts(frame, column: str, outputs: list[str]) -> np.ndarray:
    """Output tokens as the file gives them, else the output's whitespace-separated words."""
    words = np.fromiter((len(o.split()) for o in outputs), dtype=np.int64, count=len(outputs))
    if column not in frame.columns:
        return words
    given = frame[column].to_numpy(dtype=np.float64)
    return np.where(np.isfinite(given), given, words).astype(np.int64)
