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
from erroranalysis.checklist.doctor_report import (
    DoctorResult,
    Section,
    _findings_summary,
    _finite,
    _num,
    _sentence,
    _snippet,
    _status,
    _table,
    render_markdown,
)
from erroranalysis.findings import Finding
from erroranalysis.rundir import readers

REPORT_MD, REPORT_JSON = rundir.DOCTOR_MD, rundir.DOCTOR_JSON
TRAINING_CHECKS = ("non_finite", "loss_not_decreasing", "divergence", "grad_spike", "lr_zero", "lr_constant",
                   "lr_no_warmup", "lr_no_decay")


VALIDATION_CHECKS = ("overfitting", "train_val_gap")
WEAK_CLASS_GAP = 0.1
ECE_NOTABLE = 0.1
TRUNCATION_GAP = 0.1


def run_doctor(model: str | Path, data: str | Path, out: str | Path, *, train: str | Path | None = None,
               log: str | Path | None = None, data_opts=None, infer_opts=None, n: int = 100, steps: int | None = None,
               lr: float = 1e-4, overfit: bool = True, control: bool = True, overfit_max_length: int = 64,
               cluster: bool = False, slices: bool = True, embedder="minilm", seed: int = 0, overwrite: bool = False,
               progress: Callable[[str], None] | None = None) -> DoctorResult:
    """Run the checklist for `model` on `data` and write doctor.md / doctor.json into the run directory `out`."""
    from erroranalysis.data import DataOptions, read_eval_set, read_train_set
    from erroranalysis.infer.classifier import read_config, weight_files
    from erroranalysis.stages.after import AfterParams
    from erroranalysis.stages.checks import CheckParams, checks_run
    from erroranalysis.stages.cluster import ClusterParams
    from erroranalysis.stages.infer import InferParams, infer_stage, prepare
    from erroranalysis.stages.metrics import MetricsParams

    say = progress or (lambda message: None)
    data_opts = data_opts or DataOptions()
    infer_opts = infer_opts or InferParams()
    out, model = Path(out), Path(model)
    # -- every input checked before any work ------------------------------------------------------------------
    rundir.check_out(out, overwrite)
    read_config(model)
    weight_files(model)
    read_eval_set(data, data_opts)
    training_log, log_note = _training_log(model, log)
    check = CheckParams(embedder=embedder if isinstance(embedder, str) else "minilm", seed=seed)
    train_set = None if train is None else read_train_set(
        train, text_column=data_opts.text_column, label_column=data_opts.label_column, encoding=data_opts.encoding)

    sections: list[Section] = []
    # 1. memorization
    if overfit:
        say(f"1/6 can it memorize {n} examples?")
        sections.append(_memorize_section(model, data, data_opts, infer_opts, n=n, steps=steps, lr=lr,
                                          control=control, max_length=overfit_max_length, seed=seed))
    else:
        sections.append(Section("memorize", "Can it memorize a tiny dataset?", "skipped",
                                "skipped (--no-overfit)", body="Run `erroranalysis overfit --model ... --data ...`."))
    # 2-3. training and validation loss
    say("2/6 training log")
    sections.extend(_training_sections(training_log, log_note))
    # 4. classes
    say("4/6 inference and metrics")
    job = prepare(model, data, data_opts, infer_opts)
    after = AfterParams(metrics=MetricsParams(seed=seed), checks=None,  # step 6 runs the checks, with the train file
                        cluster=ClusterParams(seed=seed) if cluster else None)
    with rundir.create_run(out, overwrite=overwrite, **job.manifest(seed=seed)) as run:
        infer_stage(run, job)
        from erroranalysis.stages.after import after_predictions

        after_predictions(run, after)
        metrics = readers.read_metrics(run)
        sections.append(_classes_section(metrics))
        # 5. examples
        say("5/6 failing examples")
        sections.append(_examples_section(run, metrics, slices))
        # 6. labels and data
        say("6/6 labels and data checks")
        checks_run(run.path, check, train_set=train_set, embed=None if isinstance(embedder, str) else embedder)
        sections.append(_labels_section(run, readers.read_checks(run), readers.read_checks_report(run)))
        result = _write_report(run, sections, model, Path(data), {
            "train": str(train_set.path) if train_set is not None else None,
            "log": training_log.path if training_log is not None else None, "overfit": overfit, "n": n,
            "steps": steps, "lr": lr, "cluster": cluster, "seed": seed})
    result.run, result.report = run.path, run.file(REPORT_MD)
    return result


def _write_report(run, sections: list[Section], model: Path, data: Path, params: dict) -> DoctorResult:
    next_steps = _next_steps(sections, run)
    with run.stage("doctor", params) as staging:
        result = DoctorResult(run=run.path, report=run.file(REPORT_MD), sections=sections, next_steps=next_steps)
        staging.write_text(REPORT_MD, render_markdown(result, model=model, data=data))
        staging.write_json(REPORT_JSON, result.to_dict())
        staging.facts["statuses"] = {s.key: s.status for s in sections}
    return result


def _training_log(model: Path, log):
    from erroranalysis.checklist.training_log import load_training_log
    from erroranalysis.errors import DataError

    if log is not None:
        return load_training_log(log), f"from {log}"
    try:
        found = load_training_log(model)
    except DataError:
        return None, ("no training log given, and none found in the checkpoint folder; pass --log "
                      "(trainer_state.json, TensorBoard events, or a CSV/JSONL log with step and loss)")
    return found, f"found in the checkpoint folder: {found.path}"


def _memorize_section(model, data, data_opts, infer_opts, *, n, steps, lr, control, max_length, seed) -> Section:
    from erroranalysis.checklist.overfit import overfit_check
    from erroranalysis.checklist.overfit_diagnosis import ascii_curve
    from erroranalysis.infer.classifier import load_classifier

    clf = load_classifier(model, device=infer_opts.device, trust_remote_code=infer_opts.trust_remote_code)
    result = overfit_check(clf, data, n=n, steps=steps, lr=lr, max_length=max_length, seed=seed, control=control,
                           text_column=data_opts.text_column, label_column=data_opts.label_column,
                           encoding=data_opts.encoding, split=data_opts.split)
    del clf
    c = result.curve
    findings = [f for f in result.findings if f.check != "memorized"]
    if result.memorized:
        summary = f"memorized {result.n} examples in {c.steps_to_memorize()} steps (loss {c.final_loss:.3g})"
    else:
        summary = (f"did not memorize {result.n} examples in {result.steps_run} steps "
                   f"(loss {c.initial_loss:.3g} -> {c.final_loss:.3g}, accuracy {c.final_accuracy:.0%})")
    rows = [("loss", f"{c.initial_loss:.4g}", f"{c.final_loss:.4g}", ascii_curve(c.eval_loss)),
            ("accuracy", f"{c.eval_accuracy[0]:.1%}", f"{c.final_accuracy:.1%}", ascii_curve(c.eval_accuracy))]
    if result.control is not None:
        k = result.control
        rows.append(("loss, permuted labels (control)", f"{k.initial_loss:.4g}", f"{k.final_loss:.4g}",
                     ascii_curve(k.eval_loss)))
    body = (f"Fine-tuned an in-memory copy on {result.n} examples: {result.steps_run} AdamW steps, lr {result.lr:g}, "
            f"batch {result.batch_size}, max_length {result.max_length}; {result.params['trainable']:,} of "
            f"{result.params['total']:,} parameters trainable; inputs average {result.inputs['mean_tokens']:.0f} "
            f"tokens, {result.inputs['truncated_share']:.0%} cut.\n\n"
            + _table(["", "start", "end", "curve"], rows))
    status = "ok" if result.memorized else "problem"
    if result.memorized and any(f.severity != "info" for f in findings):
        status = "warning"
    return Section("memorize", "Can it memorize a tiny dataset?", status, summary, findings, body)


def _training_sections(log, note: str) -> list[Section]:
    from erroranalysis.checklist.training import diagnose, summarize

    if log is None:
        return [Section("training_loss", "Is training loss healthy?", "skipped", "no training log", body=note),
                Section("validation_loss", "Is validation loss healthy?", "skipped", "no training log", body=note)]
    findings = diagnose(log)
    rows = []
    for name, signal in log.signals.items():
        s = summarize(signal)
        rows.append((name, str(s["points"]), f"{s['first_step']}-{s['last_step']}", _num(s["first"]),
                     _num(s["last"]), "-" if s["min"] is None else f"{_num(s['min'])} (step {s['min_step']})"))
    body = f"Log {note} ({log.format}).\n\n" + _table(["signal", "points", "steps", "first", "last", "min"], rows)
    train_f = [f for f in findings if f.check in TRAINING_CHECKS]
    loss = log.get("loss")
    train_summary = _findings_summary(train_f, "loss falls steadily, no NaN/inf, no grad-norm spikes, "
                                               "sane learning-rate schedule")
    if loss is not None and not train_f:
        train_summary = f"healthy: {_num(float(loss.values[0]))} -> {_num(float(loss.values[-1]))} over " \
                        f"{int(loss.steps[-1])} steps"
    sections = [Section("training_loss", "Is training loss healthy?", _status(train_f), train_summary, train_f, body)]
    if log.get("eval_loss") is None:
        sections.append(Section("validation_loss", "Is validation loss healthy?", "skipped",
                                "no validation loss in the log",
                                body="The log has no validation loss; evaluate during training (eval_strategy) "
                                     "to see when overfitting starts."))
    else:
        val_f = [f for f in findings if f.check in VALIDATION_CHECKS]
        val = log.get("eval_loss")
        summary = _findings_summary(val_f, "")
        if not val_f:
            summary = f"healthy: validation loss {_num(float(val.values[-1]))} at step {int(val.steps[-1])}, " \
                      "no overfitting onset, no large train/val gap"
        sections.append(Section("validation_loss", "Is validation loss healthy?", _status(val_f), summary, val_f,
                                f"{len(val)} evaluations in the log."))
    return sections


def _classes_section(metrics: dict) -> Section:
    overall = metrics["overall"]
    per_class = sorted(metrics["per_class"], key=lambda r: (r["f1"], r["label"]))
    findings = []
    macro = overall["macro_f1"]
    confusions = metrics.get("top_confusions", [])
    for row in per_class:
        if row["support"] and row["f1"] < macro - WEAK_CLASS_GAP:
            confused = next((c for c in confusions if c["label"] == row["label"]), None)
            extra = f"; most often predicted as {confused['pred']!r} ({confused['count']} times)" if confused else ""
            findings.append(Finding("weak_class", "warning", (),
                                    f"class {row['label']!r} fails most: F1 {row['f1']:.2f} (recall "
                                    f"{row['recall']:.2f}, precision {row['precision']:.2f}, support "
                                    f"{row['support']}) against macro F1 {macro:.2f}{extra}",
                                    "Read its failures (step 5) and its label issues (step 6); more or cleaner "
                                    "training data for it usually helps most."))
    ece = overall.get("ece")
    if ece is not None and ece > ECE_NOTABLE:
        findings.append(Finding("calibration", "warning", (), f"confidence is poorly calibrated (ECE {ece:.3f})",
                                "Do not read confidence as a probability; recalibrate (temperature scaling on "
                                "validation data) if thresholds depend on it."))
    rows = [(r["label"], f"{r['precision']:.3f}", f"{r['recall']:.3f}", f"{r['f1']:.3f}", str(r["support"]))
            for r in per_class]
    body = (f"Accuracy {overall['accuracy']:.3f} on {overall['n']} examples ({overall['n_failures']} failures), "
            f"macro F1 {macro:.3f}" + (f", ECE {ece:.3f}" if ece is not None else "") + ". Classes, weakest first:\n\n"
            + _table(["class", "precision", "recall", "F1", "support"], rows))
    if confusions:
        body += "\n\nTop confusions (gold -> predicted):\n\n" + _table(
            ["gold", "predicted", "count", "share of failures"],
            [(c["label"], c["pred"], str(c["count"]), f"{c['share_of_failures']:.0%}") for c in confusions[:5]])
    weakest = per_class[0] if per_class else None
    summary = f"accuracy {overall['accuracy']:.3f}, macro F1 {macro:.3f}" + (
        f"; weakest class {weakest['label']!r} (F1 {weakest['f1']:.2f})" if weakest else "")
    return Section("classes", "Which classes fail?", _status(findings), summary, findings, body)


def _examples_section(run, metrics: dict, slices: bool) -> Section:
    preds = readers.read_predictions(run, columns=["confidence", "loss", "n_tokens", "truncated"])
    failures = preds[~preds["correct"]]
    findings: list[Finding] = []
    parts = [f"{len(failures)} of {len(preds)} examples fail."]
    if len(failures) and len(failures) < len(preds):
        cut_fail = float(failures["truncated"].mean())
        cut_ok = float(preds.loc[preds["correct"], "truncated"].mean())
        if cut_fail >= cut_ok + TRUNCATION_GAP:
            findings.append(Finding("truncated_failures", "warning", (),
                                    f"{cut_fail:.0%} of failures were cut at max_length, against {cut_ok:.0%} of "
                                    "correct predictions", "Re-run with a larger --max-length and compare, or keep "
                                    "the informative part of long texts."))
    worst = sorted(failures.itertuples(index=False), key=lambda r: -_finite(r.loss))[:10]
    if worst:
        parts.append("Highest-loss failures:\n\n" + _table(
            ["example", "gold", "predicted", "confidence", "loss", "text"],
            [(str(r.example_id), str(r.label), str(r.pred), _num(r.confidence), _num(r.loss), _snippet(r.text))
             for r in worst]))
    clusters = _clusters(run)
    if clusters:
        parts.append("Error clusters, largest first:\n\n" + _table(["cluster", "size", "name"], clusters))
    slice_rows, slice_note = _slices(run, slices)
    if slice_rows:
        parts.append("Slices whose error rate stands out:\n\n" + _table(
            ["slice", "examples", "error rate", "lift"], slice_rows))
        top = slice_rows[0]
        findings.append(Finding("error_slice", "info", (), f"{top[0]} has error rate {top[2]} ({top[3]} the average)",
                                "Look at that slice's failures first; it names a concept the model gets wrong."))
    elif slice_note:
        parts.append(slice_note)
    length = [r for r in (metrics.get("by_metadata", {}).get("text_length") or []) if r.get("error_rate") is not None]
    if length:
        worst_len = max(length, key=lambda r: r["error_rate"])
        parts.append(f"By length (words), the highest error rate is {worst_len['error_rate']:.0%} for "
                     f"{worst_len['value']} ({worst_len['n']} examples).")
    parts.append(f"Browse them all: `erroranalysis show {run.path}` or `erroranalysis ui {run.path.parent}`.")
    summary = f"{len(failures)} failures" + (f"; {len(clusters)} error clusters" if clusters else "") + (
        f"; top slice: {slice_rows[0][0]} (error rate {slice_rows[0][2]})" if slice_rows else "")
    return Section("examples", "Which examples fail?", _status(findings, info_is="ok"), summary, findings,
                   "\n\n".join(parts))


def _clusters(run) -> list[tuple]:
    frame = readers.read_clusters(run, optional=True)
    if frame is None:
        return []
    frame = frame[frame["cluster_id"] >= 0].sort_values("size", ascending=False).head(8)
    return [(str(r["cluster_id"]), str(r["size"]), _snippet(str(r.get("name", "")), 80)) for _, r in frame.iterrows()]


def _slices(run, compute: bool) -> tuple[list[tuple], str]:
    """Top slices from slices.parquet, computing them first when the run has none (the slices stage is optional)."""
    from erroranalysis.stages import slices as slice_stage

    if run.stage_status(slice_stage.STAGE) != "done":
        if not compute:
            return [], ""
        try:
            slice_stage.slices_run(run.path, merge=False)
        except Exception as exc:  # an optional step: its failure is reported, not fatal to the report
            return [], f"Slices were not computed ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})."
    slices, _ = readers.read_slices(run)
    rows = []
    for _, r in slices.head(5).iterrows():
        rows.append((_snippet(str(r["description"]), 60), str(int(r["support"])), f"{r['error_rate']:.0%}",
                     f"{r['lift']:.1f}x"))
    return rows, ("No slice stands out." if not rows else "")


def _labels_section(run, checks, report: dict) -> Section:
    findings = [Finding(f["check"], f["severity"], tuple(f["steps"]), f["message"], f["advice"])
                for f in report["findings"]]
    parts = []
    issues = report["label_issues"]
    if issues.get("available"):
        preds = run.predictions(columns=["example_id", "text"]).set_index("example_id")
        rows = [(t["example_id"], t["label"], t["suggested_label"], f"{t['score']:.2f}",
                 _snippet(str(preds["text"].get(t["example_id"], "")))) for t in issues["top"][:8]]
        parts.append(f"{issues['n_flagged']} examples are flagged as probable label issues (confident learning). "
                     "Top suspects:\n\n" + _table(["example", "given label", "model says", "score", "text"], rows))
    dups = report["duplicates"]
    parts.append(f"Duplicates: {dups['n_groups']} groups ({dups['n_exact_groups']} exact, {dups['n_near_groups']} "
                 f"near), {dups['n_conflict_groups']} with conflicting labels.")
    leak = report.get("leakage")
    if leak:
        parts.append(f"Leakage: {leak['n_in_train']} eval examples also in the train file ({leak['n_exact']} exact, "
                     f"{leak['n_near']} near), {leak['n_label_differs']} with another label there.")
    shift = report.get("shift")
    if shift:
        domain = shift.get("domain") or {}
        balance = shift.get("class_balance") or {}
        bits = []
        if domain.get("auc") is not None:
            bits.append(f"domain-classifier AUC {domain['auc']:.2f} (0.5 = indistinguishable)")
        if balance.get("p_value") is not None:
            bits.append(f"class balance chi-square p={balance['p_value']:.2g}")
        bits.append(f"{shift['vocabulary']['oov_token_rate']:.1%} of eval words unseen in train")
        parts.append("Shift between train and eval: " + "; ".join(bits) + ".")
    elif not leak:
        parts.append("No train file given: pass --train to check leakage and distribution shift.")
    parts.append(f"Per example: `{run.file('checks.parquet')}`.")
    real = [f for f in findings if f.check != "label_issues_skipped"]
    summary = _findings_summary(real, "no label, duplicate or leakage problems found")
    return Section("labels", "Is the label or the objective wrong?", _status(real), summary, findings,
                   "\n\n".join(parts))


def _next_steps(sections: list[Section], run) -> list[str]:
    """The checklist's order decides: the first broken step is the first thing to fix."""
    steps = []
    for number, section in enumerate(sections, start=1):
        for finding in section.findings:
            if finding.severity in ("error", "warning") and finding.check not in ("not_memorized",):
                steps.append(f"**{section.title}** (step {number}) {_sentence(finding.message)} {finding.advice}")
                break
    if sections[0].status == "problem" and not any("(step 1)" in step for step in steps):
        steps.insert(0, f"**{sections[0].title}** (step 1) Fix the training setup before anything else.")
    steps.append(f"Browse the failures and label error types: `erroranalysis ui {run.path.parent}`.")
    return steps[:6]
