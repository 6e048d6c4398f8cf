"""The doctor: walk the debugging checklist in order and write one report of what was found and what to do next.

1. Can it memorize a tiny dataset?          `checklist.overfit.overfit_check` on an in-memory copy of the checkpoint
2. Is training loss healthy?                `checklist.training.diagnose` on the training log (trainer_state.json, ...)
3. Is validation loss healthy?              the same log's validation loss: overfitting onset, train/val gap
4. Which classes fail?                      `stages.infer` and `stages.after` (inference + metrics) into a run directory
5. Which examples fail?                     the highest-loss failures, truncation, error clusters and slices
6. Is the label or the objective wrong?     `stages.checks_run`: label issues, duplicates, leakage, shift

Everything the user can get wrong (paths, columns, log format, an existing --out) is checked before the first
step, so a bad call fails at once with one line. The report is `doctor.md` (and `doctor.json`, the same content
as data, for the app) in the run directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from erroranalysis import rundir
from erroranalysis.checklist import doctor_report as report
from erroranalysis.checklist.doctor_report import DoctorResult, Section, render_markdown
from erroranalysis.checklist.memorize import OverfitParams
from erroranalysis.core import storage
from erroranalysis.rundir import readers

REPORT_MD, REPORT_JSON = rundir.DOCTOR_MD, rundir.DOCTOR_JSON


def run_doctor(model: str | Path, data: str | Path, out: str | Path, *, log: str | Path | None = None,
               data_opts=None, infer_opts=None, overfit=OverfitParams(), checks=None, cluster=None,
               slices: bool = True, embed=None, seed: int = 0, overwrite: bool = False,
               progress: Callable[[str], None] | None = None) -> DoctorResult:
    """Run the checklist for `model` on `data` and write doctor.md / doctor.json into the run directory `out`.

    `overfit` (OverfitParams, None skips the memorization check), `checks` (CheckParams: the training file, the
    embedder), `cluster` (ClusterParams; None: no clustering); `embed` (texts -> vectors) replaces the checks'
    embedder."""
    from erroranalysis.infer.classifier import read_config, weight_files
    from erroranalysis.sources.table import DataOptions, read_eval_set
    from erroranalysis.sources.train_table import read_train_set
    from erroranalysis.stages.after import AfterParams
    from erroranalysis.stages.data_checks import CheckParams, checks_run
    from erroranalysis.stages.infer import InferParams, infer_stage, prepare
    from erroranalysis.stages.metrics import MetricsParams

    say = progress or (lambda message: None)
    data_opts = data_opts or DataOptions()
    infer_opts = infer_opts or InferParams()
    check = (checks or CheckParams()).replace(seed=seed)
    out, model = Path(out), Path(model)
    # -- every input checked before any work ------------------------------------------------------------------
    rundir.check_out(out, overwrite)
    read_config(model)
    weight_files(model)
    read_eval_set(data, data_opts)
    training_log, log_note = _training_log(model, log)
    train_set = None if check.train is None else read_train_set(
        check.train, text_column=data_opts.text_column, label_column=data_opts.label_column,
        encoding=data_opts.encoding)

    sections: list[Section] = []
    # 1. memorization
    if overfit is not None:
        say(f"1/6 can it memorize {overfit.n} examples?")
        sections.append(_memorize_section(model, data, data_opts, infer_opts, overfit.replace(seed=seed)))
    else:
        sections.append(Section("memorize", "Can it memorize a tiny dataset?", "skipped",
                                "skipped (--no-overfit)", body="Run `erroranalysis overfit --model ... --data ...`."))
    # 2-3. training and validation loss
    say("2/6 training log")
    sections.extend(report.training_sections(training_log, log_note))
    # 4. classes
    say("4/6 inference and metrics")
    job = prepare(model, data, data_opts, infer_opts)
    after = AfterParams(metrics=MetricsParams(seed=seed), checks=None,  # step 6 runs the checks, with the train file
                        cluster=cluster.replace(seed=seed) if cluster is not None else None)
    with rundir.create_run(out, overwrite=overwrite, **job.manifest(seed=seed)) as run:
        infer_stage(run, job)
        from erroranalysis.stages.after import after_predictions

        after_predictions(run, after)
        metrics = readers.read_metrics(run)
        sections.append(report.classes_section(metrics))
        # 5. examples
        say("5/6 failing examples")
        sections.append(_examples_section(run, metrics, slices))
        # 6. labels and data
        say("6/6 labels and data checks")
        checks_run(run.path, check, train_set=train_set, embed=embed)
        texts = run.predictions(columns=["example_id", "text"]).set_index("example_id")["text"]
        sections.append(report.labels_section(readers.read_checks_report(run), texts, run.file(rundir.CHECKS)))
        result = _write_report(run, sections, model, Path(data), {
            "train": storage.record_name(train_set.path) if train_set is not None else None,
            "log": training_log.path if training_log is not None else None,
            "overfit": overfit.record() if overfit is not None else None, "cluster": cluster is not None,
            "seed": seed})
    result.run, result.report = run.path, run.file(REPORT_MD)
    return result


def run_doctor_generation(model: str | Path, data: str | Path, out: str | Path, *, log: str | Path | None = None,
                          data_opts=None, gen_opts=None, overfit=OverfitParams(), checks=None, seed: int = 0,
                          overwrite: bool = False, progress: Callable[[str], None] | None = None) -> DoctorResult:
    """The checklist for a causal LM (a folder or a .gguf file): memorize SFT answers (the training file,
    `checks.train`), the training log, a generation run over the prompt set `data` (which outputs and examples
    fail), then the data checks with contamination against the training file; doctor.md / doctor.json in `out`."""
    from erroranalysis.checklist import doctor_llm
    from erroranalysis.checklist.overfit import overfit_check
    from erroranalysis.infer.causal_lm import check_gguf, is_gguf
    from erroranalysis.infer.classifier import read_config
    from erroranalysis.infer.generation import GenerationParams
    from erroranalysis.sources.table import DataOptions
    from erroranalysis.stages.after import AfterParams
    from erroranalysis.stages.contamination import read_train_texts
    from erroranalysis.stages.data_checks import CheckParams, checks_run
    from erroranalysis.stages.generate import check_parameters, prepare_eval_set, run_generation
    from erroranalysis.stages.metrics import MetricsParams

    say = progress or (lambda message: None)
    data_opts, gen_opts = data_opts or DataOptions(), gen_opts or GenerationParams()
    check = (checks or CheckParams()).replace(seed=seed)
    out, model = Path(out), Path(model)
    # -- every input checked before any work ------------------------------------------------------------------
    rundir.check_out(out, overwrite)
    check_gguf(model) if is_gguf(model) else read_config(model)
    check_parameters(gen_opts)
    prepare_eval_set(data, data_opts, gen_opts)
    if check.train is not None:
        read_train_texts(check)
    training_log, log_note = _training_log(model if model.is_dir() else model.parent, log)

    sections: list[Section] = []
    if overfit is not None and check.train is not None:
        say(f"1/6 can it memorize {overfit.n} SFT answers?")
        memorized = overfit_check(model, check.train, overfit.replace(seed=seed), task="generation",
                                  data_opts=DataOptions(encoding=check.encoding, split=check.split))
        sections.append(doctor_llm.memorize_section(memorized))
    else:
        why = "skipped (--no-overfit)" if overfit is None else "skipped: no training file (--train sft.jsonl)"
        sections.append(Section("memorize", "Can it memorize a few SFT answers?", "skipped", why,
                                body="Run `erroranalysis overfit --task generation --model ... --data sft.jsonl`."))
    say("2/6 training log")
    sections.extend(report.training_sections(training_log, log_note))
    say("4/6 generation and output checks")
    after = AfterParams(metrics=MetricsParams(seed=seed), checks=None, slices=None, cluster=None)
    run = run_generation(model, data, out, data_opts=data_opts, gen_opts=gen_opts, after=after, overwrite=overwrite)
    metrics = readers.read_metrics(run)
    sections.append(doctor_llm.outputs_section(metrics))
    say("5/6 failing examples")
    preds = readers.read_predictions(run, columns=["reference_loss", "failure_reason", "output"])
    sections.append(doctor_llm.failures_section(preds, metrics))
    say("6/6 data checks and contamination")
    checks_run(run.path, check)
    sections.append(doctor_llm.data_section(readers.read_checks_report(run), check.train))
    result = _write_report(run, sections, model, Path(data), {
        "task": "generation", "train": storage.record_name(check.train) if check.train is not None else None,
        "log": training_log.path if training_log is not None else None,
        "overfit": overfit.record() if overfit is not None else None, "seed": seed})
    result.run, result.report = run.path, run.file(REPORT_MD)
    return result


def _write_report(run, sections: list[Section], model: Path, data: Path, params: dict) -> DoctorResult:
    next_steps = report.next_steps(sections, run.path)
    with run.stage("doctor", params) as staging:
        result = DoctorResult(run=run.path, report=run.file(REPORT_MD), sections=sections, next_steps=next_steps)
        staging.write_text(REPORT_MD, render_markdown(result, model=model, data=data))
        staging.write_json(REPORT_JSON, result.to_dict())
        staging.facts["statuses"] = {s.key: s.status for s in sections}
    return result


def _training_log(model: Path, log):
    from erroranalysis.checklist.training_log import load_training_log
    from erroranalysis.core.errors import DataError

    if log is not None:
        return load_training_log(log), f"from {log}"
    try:
        found = load_training_log(model)
    except DataError:
        return None, ("no training log given, and none found in the checkpoint folder; pass --log "
                      "(trainer_state.json, TensorBoard events, or a CSV/JSONL log with step and loss)")
    return found, f"found in the checkpoint folder: {found.path}"


def _memorize_section(model, data, data_opts, infer_opts, params) -> Section:
    from erroranalysis.checklist.overfit import overfit_check
    from erroranalysis.infer.classifier import load_classifier

    clf = load_classifier(model, device=infer_opts.device, trust_remote_code=infer_opts.trust_remote_code)
    result = overfit_check(clf, data, params, data_opts=data_opts)
    del clf
    return report.memorize_section(result)


def _examples_section(run, metrics: dict, compute_slices: bool) -> Section:
    preds = readers.read_predictions(run, columns=["confidence", "loss", "n_tokens", "truncated"])
    slices, note = _slices(run, compute_slices)
    return report.examples_section(preds, metrics, readers.read_clusters(run, optional=True), slices, note, run.path)


def _slices(run, compute: bool):
    """(slices.parquet or None, why there are none), computing them first when the run has none (the slices stage
    is optional)."""
    from erroranalysis.stages import slices as slice_stage

    if run.stage_status(slice_stage.STAGE) != "done":
        if not compute:
            return None, ""
        try:
            slice_stage.slices_run(run.path, merge=False)
        except Exception as exc:  # an optional step: its failure is reported, not fatal to the report
            return None, f"Slices were not computed ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})."
    return readers.read_slices(run)[0], ""
