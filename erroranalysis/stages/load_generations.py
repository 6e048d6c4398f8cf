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
from erroranalysis.sources.generations import SourceParams, not_a_format, read_generations
from erroranalysis.sources.table import DataOptions, InMemory, as_source
from erroranalysis.stages.after import AfterParams, after_predictions
from erroranalysis.stages.analyze import Reading
from erroranalysis.stages.common import say_notes
from erroranalysis.stages.generate import prediction_table, prepare_eval_set
from erroranalysis.tasks import Task

UNKNOWN_STOP = "unknown"  # a file that does not say why generation stopped
STRUCTS = {dict: "dict (a JSON object, a struct)", list: "list (a JSON array)"}
# What a file may say about each generation (`sources.completions`, the lm-eval reader), kept as the run's columns
# and never metadata groups.
GIVEN = ("stop_reason", "n_output_tokens", "stop_sequence", "max_tokens", "filtered_output", "judge_detail")


def analyze_generations(data: str | Path | InMemory, out: str | Path, reading: Reading, *, task: Task,
                        after: AfterParams = AfterParams(), overwrite: bool = False, embedder=None, progress=None,
                        engine=None) -> Run:
    """Check and score the outputs in `data` (a table, an lm-eval samples file, an Inspect log, chat JSONL; see
    `erroranalysis.sources.generations`), write the run at `out`, then metrics and the stages `after` names."""
    data_opts, gen_opts, source = reading.data, reading.generation, reading.source
    prepared = prepare_generations(data, data_opts, gen_opts, source)
    say_notes(prepared["eval_set"], progress)
    if engine is not None and engine.distributed:
        from erroranalysis.engines import ray_data

        ray_data.connect(engine)  # fail before the run directory exists when Ray is missing or unreachable
    if prepared["excluded"] and progress is not None and hasattr(progress, "note"):
        progress.note(_excluded_note(prepared["excluded"]))
    manifest = {"task": "generation", "labels": prepared["labels"], "seed": after.seed,
                "data": {**prepared["data_entry"], "source_format": prepared["source_format"],
                         **{k: prepared[k] for k in ("filters", "filter", "excluded", "lengths") if prepared[k]}},
                "generation": {"source": prepared["source_format"], "output_checks": prepared["checks"],
                               "allowed_labels": prepared["allowed"], "extra_labels": list(gen_opts.labels),
                               "regex": gen_opts.regex, **prepared["scoring"].record(),
                               "judge": prepared["given"].get("score"), "pass_threshold": source.pass_threshold}}
    params = {**source.record(), "output_checks": prepared["checks"]}
    with create_run(out, overwrite=overwrite, **manifest) as run:
        with run.stage("load_predictions", params) as staging:
            staging.write_parquet(rundir.PREDICTIONS, imported_table(prepared), engine)  # where workers read it
        after_predictions(run, after, embedder=embedder, progress=progress, engine=engine)
    return run


def prepare_generations(data, data_opts: DataOptions, gen_opts: GenerationParams, source: SourceParams) -> dict:
    """The file read and validated as a prompt set with its outputs (what `prediction_table` needs)."""
    data = as_source(data)
    frame, fmt = read_generations(data, source, encoding=data_opts.encoding, split=data_opts.split)
    columns = [c for c in frame.columns if c != "_line"]
    if source.output_column not in columns:
        tried = not_a_format(frame.attrs.get("tried") or {})
        raise DataError(f"{data}: read as a {fmt}, it has no output column {source.output_column!r}; columns found: "
                        f"{preview(columns)}; name it with --output-column"
                        + (f" (formats tried: {tried}; or pass --source-format)." if tried else "."))
    judge = source.judge_column(columns, frame.attrs.get("judge"))
    if judge is not None and judge not in columns:
        raise DataError(f"{data}: no score column {judge!r}; columns found: {preview(columns)}; fix --score-column.")
    given = {"output": source.output_column, **({"score": judge} if judge else {}),
             **{c: c for c in GIVEN if c in columns}}
    if fmt != "table" and data_opts.id_column is None and "example_id" in columns:
        data_opts = data_opts.replace(id_column="example_id")  # the reader's ids (a doc id, a sample id)
    _outputs(frame[source.output_column], frame["_line"], str(data), source.output_column)  # its type named
    # before what the checks lack: a struct output is the problem, not a missing reference
    prepared = prepare_eval_set(data, data_opts, gen_opts, table=(frame, fmt), given=given,
                                pass_threshold=source.pass_threshold)
    prepared["outputs"] = _outputs(prepared["eval_set"].frame[source.output_column], prepared["lines"],
                                   prepared["source"], source.output_column)
    prepared["source_format"] = fmt
    if "judge_detail" in given:  # the reader's words for a failing judge (lm-eval: no answer extracted, or which)
        for row, detail in zip(prepared["rows"], prepared["eval_set"].frame["judge_detail"]):
            row["judge_detail"] = detail
    reading = set(frame.attrs.get("reading_columns") or ()) | set(GIVEN)
    entry = prepared["data_entry"]
    entry["metadata_columns"] = [c for c in entry["metadata_columns"] if c not in reading]
    entry["reading_columns"] = [c for c in prepared["metadata"] if c in reading]
    prepared["filters"], prepared["filter"] = frame.attrs.get("filters"), frame.attrs.get("filter")
    prepared["excluded"] = frame.attrs.get("excluded") if (frame.attrs.get("excluded") or {}).get("errors") or \
        (frame.attrs.get("excluded") or {}).get("unanswered") else None
    prepared["lengths"] = "tokens" if "n_output_tokens" in columns else "words"
    return prepared


def _excluded_note(excluded: dict) -> str:
    return (f"{excluded['errors']} request(s) answered with an error and {excluded['unanswered']} without a "
            f"response are not analyzed (first: {'; '.join(excluded['first'])}); the manifest lists them.")


def _outputs(values, lines, source: str, column: str) -> list[str]:
    outputs = []
    for i, value in enumerate(values.to_numpy(dtype=object)):
        if value is None or (isinstance(value, float) and np.isnan(value)):
            outputs.append("")  # no output is an empty answer: the checks say how it fails
        elif isinstance(value, str):
            outputs.append(value)
        else:
            found = STRUCTS.get(type(value), type(value).__name__)
            raise DataError(f"{where(source, int(np.asarray(lines)[i]), column)}: holds a {found}, not text; the "
                            "output column must hold the model's text (a structured output as its JSON string).")
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
    table = prediction_table(prepared, result, n_tokens, frame["_cut"].to_numpy(dtype=bool))
    for column in ("stop_sequence", "max_tokens", "filtered_output"):
        if column in frame.columns:
            table[column] = frame[column].to_numpy()
    return table


def _counts(frame, column: str, outputs: list[str]) -> np.ndarray:
    """Output tokens as the file gives them, else the output's whitespace-separated words."""
    words = np.fromiter((len(o.split()) for o in outputs), dtype=np.int64, count=len(outputs))
    if column not in frame.columns:
        return words
    given = frame[column].to_numpy(dtype=np.float64)
    return np.where(np.isfinite(given), given, words).astype(np.int64)
