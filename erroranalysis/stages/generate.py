"""`erroranalysis run --task generation`: a causal or seq2seq LM over a prompt set, output checks, losses, then the
usual stages.

Everything the user can get wrong (columns, schema and tools cells, check names, the model, the chat template,
the context budget) is checked before the run directory is created, so a bad call leaves nothing behind; the
`infer` stage then generates, checks and writes `predictions.parquet` in one atomic step, and the lead pipeline's
metrics and clustering follow. See docs/generation.md.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from erroranalysis import rundir
from erroranalysis.core.errors import DataError, ParameterError, preview, where
from erroranalysis.core.progress import as_reporter
from erroranalysis.infer import output_cells, output_checks
from erroranalysis.infer.generation import GenerationParams
from erroranalysis.infer.scorers import ScorerParams, require_packages
from erroranalysis.metrics.generation import low_loss_failures
from erroranalysis.rundir import Run, create_run
from erroranalysis.sources.table import DataOptions, EvalSet, as_source, load_eval_set, read_table
from erroranalysis.stages.after import AfterParams, after_predictions

PASS, FAIL = "pass", "fail"
UNPARSEABLE = output_checks.UNPARSEABLE


# Columns a generation run adds to the core columns of predictions.parquet (metadata named like them get `meta_`).
GENERATION_COLUMNS = ("prompt", "output", "reference", "reference_loss", "output_loss", "n_output_tokens",
                      "stop_reason", "failure_reason", "low_loss_failure", "messages", "schema", "regex", "tools",
                      "checks", "score")


INPUT_ROLES = ("schema", "regex", "tools", "checks")


def run_generation(model: str | Path, data: str | Path, out: str | Path, *, data_opts: DataOptions = DataOptions(),
                   gen_opts: GenerationParams = GenerationParams(), after: AfterParams = AfterParams(),
                   overwrite: bool = False, progress=None, log: Callable[[str], None] | None = None,
                   embedder=None) -> Run:
    """Generate with `model` over the prompt set `data`, check the outputs, write the run at `out`, then run
    metrics (with an "output_checks" section) and the stages `after` names over the failing examples. `progress`:
    an `erroranalysis.core.progress.Reporter`, or a function (rows done, total)."""
    from erroranalysis.infer.causal_lm import load_causal_lm

    check_parameters(gen_opts)
    prepared = prepare_eval_set(data, data_opts, gen_opts)
    lm = load_causal_lm(model, device=gen_opts.device, precision=gen_opts.precision,
                        trust_remote_code=gen_opts.trust_remote_code, log=log)
    encoded = encode_eval_set(lm, prepared, gen_opts)
    with create_run(out, overwrite=overwrite, **generation_manifest(lm, prepared, gen_opts, encoded,
                                                                    seed=after.seed)) as run:
        generation_stage(run, lm, prepared, gen_opts, encoded, progress)
        after_predictions(run, after, embedder=embedder, progress=progress)
    return run


def encode_eval_set(lm, prepared: dict, gen_opts: GenerationParams) -> dict:
    """The prompts rendered (chat template) and tokenized within the context budget, and the references."""
    from erroranalysis.infer.generation import encode_answers, encode_prompts, prompt_budget

    texts, templated = _render(lm, prepared, gen_opts)
    budget = prompt_budget(lm, gen_opts)
    prompt_ids, truncated, _ = encode_prompts(lm, texts, templated, budget)
    reference_ids = encode_answers(lm, prepared["reference"]) if prepared["reference"] is not None else None
    return {"prompt_ids": prompt_ids, "truncated": truncated, "reference_ids": reference_ids, "budget": budget}


def generation_manifest(lm, prepared: dict, gen_opts: GenerationParams, encoded: dict, **extra) -> dict:
    """The manifest fields of a generation run."""
    return {"task": "generation", "labels": prepared["labels"],
            "model": {**lm.describe(), "batch_size": gen_opts.rows_per_batch, "max_length": encoded["budget"]},
            "data": prepared["data_entry"], "device": lm.device,
            "generation": {**gen_opts.describe(), "output_checks": prepared["checks"],
                           "allowed_labels": prepared["allowed"]}, **extra}


def generation_stage(run: Run, lm, prepared: dict, gen_opts: GenerationParams, encoded: dict, progress=None,
                     training_state: dict | None = None) -> None:
    """The infer stage of a generation run: generate, check the outputs, commit predictions.parquet (with the
    Trainer's state as trainer_state.json when the model is still in training)."""
    eval_set: EvalSet = prepared["eval_set"]
    params = {**gen_opts.describe(), "device": lm.device, "precision": lm.precision,
              "output_checks": prepared["checks"]}
    n = len(eval_set)
    with run.stage("infer", params) as staging, as_reporter(progress).stage("generate", n) as advance:
        start = time.perf_counter()
        result = _generate(lm, encoded["prompt_ids"], encoded["reference_ids"], gen_opts, advance)
        seconds = max(time.perf_counter() - start, 1e-9)
        staging.facts["examples_per_second"] = round(n / seconds, 2)
        staging.facts["tokens_per_second"] = round(float(result["n_output_tokens"].sum()) / seconds, 1)
        staging.facts["truncated_prompts"] = int(encoded["truncated"].sum())
        n_tokens = [len(p) for p in encoded["prompt_ids"]]
        staging.write_parquet(rundir.PREDICTIONS, prediction_table(prepared, result, n_tokens, encoded["truncated"]))
        if training_state is not None:
            staging.write_json(rundir.TRAINER_STATE, training_state)


def _generate(lm, prompt_ids, reference_ids, opts, progress):
    from erroranalysis.infer.generation import generate

    return generate(lm, prompt_ids, opts, reference_ids=reference_ids, progress=progress)


def prepare_eval_set(data: str | Path, data_opts: DataOptions, gen_opts: GenerationParams, *,
                     table=None, given: dict[str, str] | None = None, pass_threshold: float = 0.5) -> dict[str, Any]:
    """Read and validate a prompt set: prompt or messages, reference, label, schema, regex, tools, checks.

    For generations made elsewhere: `table` is the file as a reader of its format read it (frame with `_line`,
    format), and `given` maps the roles "output" and "score" (a judge's score or pass flag, passing at
    `pass_threshold`) to its columns; a role whose column is absent is left out (the output is required)."""
    path = as_source(data)
    raw, _ = table if table is not None else read_table(path, encoding=data_opts.encoding, split=data_opts.split)
    columns = [c for c in raw.columns if c != "_line"]
    given = {role: column for role, column in (given or {}).items() if column in columns}
    prompt_column = _prompt_column(path, columns, data_opts, gen_opts)
    label_column = data_opts.label_column if data_opts.label_column in columns else None
    if label_column is None and data_opts.label_column not in (None, "", "label"):
        raise DataError(f"{path}: no label column {data_opts.label_column!r}; columns found: {preview(columns)}; "
                        "fix --label-column or drop it.")
    roles = {"reference": gen_opts.reference_column, **{r: r for r in INPUT_ROLES}}
    present = {role: col for role, col in roles.items() if col in columns and col not in (prompt_column, label_column)}
    messages = prompt_column == gen_opts.messages_column
    required = [*([prompt_column] if messages else []), *present.values(), *given.values()]
    eval_set = load_eval_set(path, text_column=prompt_column, label_column=label_column,
                             id_column=data_opts.id_column, encoding=data_opts.encoding, split=data_opts.split,
                             required=tuple(dict.fromkeys(required)), max_chars=data_opts.max_chars, keep_end=True,
                             strings_only=not messages, table=table)
    frame = eval_set.frame
    lines = frame["_line"].to_numpy()
    source = str(eval_set.path)

    parsed = output_cells.prepare_columns(frame, source=source, lines=lines,
                                      columns={r: c for r, c in present.items() if r in INPUT_ROLES},
                                      regex=gen_opts.regex)
    available = set(present) | ({"label"} if label_column else set()) | ({"regex"} if gen_opts.regex else set())
    available |= {"score"} & set(given)
    checks = output_cells.check_names(gen_opts.output_checks) if gen_opts.output_checks else None
    if checks is None:
        checks = output_checks.default_checks(available)
    missing = output_checks.missing_inputs(checks, available)
    if missing:
        check, need = missing[0]
        column = gen_opts.reference_column if need == "reference" else need
        raise DataError(f"{source}: check {check!r} needs a {column!r} column, which the eval set lacks; add it "
                        "or choose other --output-checks.")
    per_row = parsed.get("checks")
    if per_row is not None:
        for i, names in enumerate(per_row):
            for check, need in output_checks.missing_inputs(names or [], available):
                column = gen_opts.reference_column if need == "reference" else need
                raise DataError(f"{where(source, int(lines[i]), present['checks'])}: check {check!r} needs a "
                                f"{column!r} column, which the eval set lacks.")
    if not checks and not (per_row and any(per_row)):
        raise DataError(f"{source}: no check applies: add a 'reference', 'label', 'schema', 'regex' or 'tools' "
                        "column, or a 'checks' column, or pass --output-checks.")
    require_packages(set(checks) | {c for names in per_row or [] for c in names or []})
    scores = judge_scores(frame, given.get("score"), source, lines) if "score" in given else None

    gold = frame["label"].to_numpy(dtype=object) if label_column else None
    allowed: list[str] = []
    if gold is not None:
        if UNPARSEABLE in set(gold):
            line = int(lines[int(np.flatnonzero(gold == UNPARSEABLE)[0])])
            raise DataError(f"{where(source, line, label_column)}: the label {UNPARSEABLE!r} is reserved for "
                            "outputs that name no allowed label; rename that class.")
        allowed = sorted(set(gold) | set(gen_opts.labels))
        labels = allowed + [UNPARSEABLE]
    else:
        labels = [PASS, FAIL]

    message_lists = None
    if messages:
        from erroranalysis.sources.messages import parse_messages

        message_lists = [parse_messages(cell, where(source, int(lines[i]), prompt_column))
                         for i, cell in enumerate(frame[prompt_column].to_numpy(dtype=object))]
        prompts = [_show_messages(m) for m in message_lists]
    else:
        prompts = frame["text"].tolist()

    reference = None
    if "reference" in present:
        ref_col = frame[present["reference"]]
        reference = [None if v is None or (isinstance(v, float) and np.isnan(v)) else
                     (v if isinstance(v, str) else json.dumps(_plain(v))) for v in ref_col.to_numpy(dtype=object)]

    rows = []
    for i in range(len(frame)):
        row = {"reference": reference[i] if reference is not None else None,
               "label": gold[i] if gold is not None else None}
        for role in ("schema", "regex", "tools"):
            row[role] = parsed[role][i] if role in parsed else None
        if scores is not None:
            row["score"], row["pass_threshold"], row["judge"] = scores[i], pass_threshold, given["score"]
        rows.append(row)

    metadata = [c for c in eval_set.metadata_columns]
    entry = eval_set.describe()
    entry["columns"] = {**entry["columns"], "prompt": None if messages else prompt_column,
                        "messages": prompt_column if messages else None, **present}
    entry["metadata_columns"] = [_meta_name(c) for c in metadata]
    return {"eval_set": eval_set, "prompts": prompts, "messages": message_lists, "reference": reference,
            "gold": gold, "rows": rows, "checks": checks, "per_row_checks": per_row, "labels": labels,
            "allowed": allowed, "metadata": metadata, "data_entry": entry, "present": present,
            "parsed": parsed, "lines": lines, "source": source, "given": given,
            "scoring": gen_opts.project(ScorerParams)}


def _prompt_column(path: Path, columns: list[str], data_opts: DataOptions, gen_opts: GenerationParams) -> str:
    if data_opts.text_column and data_opts.text_column != "text":
        if data_opts.text_column not in columns:
            raise DataError(f"{path}: no column {data_opts.text_column!r}; columns found: {preview(columns)}; "
                            "name the prompt column with --text-column.")
        return data_opts.text_column
    for name in ("prompt", gen_opts.messages_column, "text"):
        if name in columns:
            return name
    raise DataError(f"{path}: no 'prompt' or {gen_opts.messages_column!r} column; columns found: {preview(columns)}; "
                    "name the prompt column with --text-column.")


def _show_messages(messages: list[dict]) -> str:
    return "\n".join(f"{m['role']}: {m['content']}" for m in messages)


def _plain(value):
    return value.tolist() if hasattr(value, "tolist") else value


def _render(lm, prepared: dict, opts: GenerationParams) -> tuple[list[str], list[bool]]:
    from erroranalysis.infer.generation import render_prompt

    texts, templated = [], []
    messages = prepared["messages"]
    column = prepared["data_entry"]["columns"]["messages"] or prepared["data_entry"]["columns"]["prompt"]
    for i, prompt in enumerate(prepared["prompts"]):
        try:
            text, flag = render_prompt(lm, prompt=None if messages else prompt,
                                       messages=messages[i] if messages else None, chat_template=opts.chat_template)
        except ValueError as exc:
            raise DataError(f"{where(prepared['source'], int(prepared['lines'][i]), column)}: {exc}.") from None
        texts.append(text)
        templated.append(flag)
    return texts, templated


def _meta_name(column: str) -> str:
    return f"meta_{column}" if column in GENERATION_COLUMNS or column.startswith("check_") else column


def judge_scores(frame, column: str, source: str, lines) -> list[float | None]:
    """A judge's column as numbers: a score, or a pass flag (true 1, false 0); empty cells are None."""
    scores: list[float | None] = []
    for i, value in enumerate(frame[column].to_numpy(dtype=object)):
        if value is None or (isinstance(value, float) and np.isnan(value)):
            scores.append(None)
        elif isinstance(value, (bool, np.bool_, int, float, np.integer, np.floating)):
            scores.append(float(value))
        else:
            raise DataError(f"{where(source, int(lines[i]), column)}: {preview([value])} is not a score; a judge's "
                            "column holds numbers or true/false.")
    return scores


def prediction_table(prepared: dict, result: dict, n_tokens, truncated: np.ndarray):
    """predictions.parquet for a generation run: the core columns, then prompt, output, checks and losses
    (`n_tokens`: the prompt's tokens as the model saw them, per row)."""
    import pandas as pd

    eval_set: EvalSet = prepared["eval_set"]
    frame = eval_set.frame
    outputs = list(result["output"])
    rows = [{**row, "stop_reason": reason} for row, reason in zip(prepared["rows"], result["stop_reason"])]
    checked = output_checks.run_checks(outputs, rows, prepared["checks"], labels=prepared["allowed"],
                                       per_row_checks=prepared["per_row_checks"], scoring=prepared["scoring"])
    passed = checked["passed"].to_numpy(dtype=bool)
    if prepared["gold"] is not None:
        label = prepared["gold"].astype(str)
        pred = checked["pred"].astype(str).to_numpy()
    else:
        label = np.full(len(frame), PASS, dtype=object)
        pred = np.where(passed, PASS, FAIL).astype(object)
    output_loss = np.asarray(result["output_loss"], dtype=np.float32)
    reference_loss = np.asarray(result["reference_loss"], dtype=np.float32)
    prompts = prepared["prompts"]
    table = pd.DataFrame({
        "example_id": frame["example_id"].astype(str).to_numpy(),
        "text": [f"{p}\n\n{o}" for p, o in zip(prompts, outputs)],
        "label": label,
        "pred": pred,
        "correct": passed,
        "confidence": np.exp(-output_loss).astype(np.float32),
        "loss": reference_loss,
        "n_tokens": np.asarray(n_tokens, dtype=np.int32),
        "truncated": np.asarray(truncated, dtype=bool) | frame["_cut"].to_numpy(dtype=bool),
        "prompt": prompts,
        "output": outputs,
        "reference": pd.array(prepared["reference"] if prepared["reference"] is not None else [None] * len(frame),
                              dtype="string"),
        "reference_loss": reference_loss,
        "output_loss": output_loss,
        "n_output_tokens": np.asarray(result["n_output_tokens"], dtype=np.int32),
        "stop_reason": list(result["stop_reason"]),
        "failure_reason": checked["failure_reason"].to_numpy(),
        "low_loss_failure": low_loss_failures(reference_loss, passed),
    })
    for column in checked.columns:
        if column.startswith("check_"):
            table[column] = checked[column].to_numpy()
    if "score" in prepared["given"]:
        table["score"] = np.array([np.nan if r["score"] is None else r["score"] for r in prepared["rows"]])
    present = prepared["present"]
    if prepared["messages"] is not None:
        table["messages"] = [json.dumps(m, ensure_ascii=False) for m in prepared["messages"]]
    for role in ("schema", "tools"):
        if role in present:
            table[role] = [None if v is None else json.dumps(v, ensure_ascii=False) for v in prepared["parsed"][role]]
    if "regex" in prepared["parsed"]:
        table["regex"] = [None if p is None else p.pattern for p in prepared["parsed"]["regex"]]
    if "checks" in present:
        table["checks"] = [None if v is None else ",".join(v) for v in prepared["parsed"]["checks"]]
    for column in prepared["metadata"]:
        table[_meta_name(column)] = frame[column].to_numpy()
    return table


def check_parameters(gen_opts: GenerationParams) -> None:
    """Validate options alone (the CLI may call it before anything is read)."""
    if gen_opts.output_checks:
        output_cells.check_names(gen_opts.output_checks)
    if gen_opts.regex is not None:
        try:
            output_cells.parse_regex(gen_opts.regex)
        except ValueError as exc:
            raise ParameterError("regex", gen_opts.regex, str(exc).replace("not a valid", "a valid", 1)) from None
