"""The doctor's report: one section per checklist step, made from what the step found (an overfit result, a
training log, metrics, the predictions, clusters, slices and the data checks), in checklist order, with the next
steps; rendered as Markdown (doctor.md) and data (doctor.json). Nothing here reads a run directory:
erroranalysis.stages.run_doctor reads and passes what each section needs."""

from __future__ import annotations

import datetime as _dt
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from erroranalysis.core.findings import SEVERITIES, Finding

TRAINING_CHECKS = ("non_finite", "loss_not_decreasing", "divergence", "grad_spike", "lr_zero", "lr_constant",
                   "lr_no_warmup", "lr_no_decay")
VALIDATION_CHECKS = ("overfitting", "train_val_gap")
WEAK_CLASS_GAP = 0.1
ECE_NOTABLE = 0.1
TRUNCATION_GAP = 0.1

STATUSES = ("problem", "warning", "ok", "skipped")
STATUS_TEXT = {"problem": "PROBLEM", "warning": "WARNING", "ok": "OK", "skipped": "skipped"}


@dataclass
class Section:
    key: str
    title: str
    status: str          # one of STATUSES
    summary: str         # one line for the summary table
    findings: list[Finding] = field(default_factory=list)
    body: str = ""       # Markdown details

    def to_dict(self) -> dict:
        out = asdict(self)
        out["findings"] = [f.to_dict() for f in self.findings]
        return out


@dataclass
class DoctorResult:
    run: Path
    report: Path
    sections: list[Section]
    next_steps: list[str]

    def to_dict(self) -> dict:
        return {"run": str(self.run), "report": str(self.report), "next_steps": self.next_steps,
                "sections": [s.to_dict() for s in self.sections]}


def render_markdown(result: DoctorResult, *, model: Path, data: Path) -> str:
    from erroranalysis import __version__

    lines = [f"# Doctor report: {model.name} on {data.name}", "",
             f"Run directory `{result.run}`, written {_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds')} by erroranalysis {__version__}.", "",
             "## Summary", "",
             _table(["#", "check", "result", "finding"],
                    [(str(i), s.title, STATUS_TEXT[s.status], s.summary) for i, s in enumerate(result.sections, 1)]),
             "", "## What to look at next", ""]
    lines += [f"{i}. {step}" for i, step in enumerate(result.next_steps, 1)]
    for i, s in enumerate(result.sections, 1):
        lines += ["", f"## {i}. {s.title} ({STATUS_TEXT[s.status]})", "", s.summary[:1].upper() + s.summary[1:] + ".", ""]
        if s.body:
            lines += [s.body, ""]
        for f in sorted(s.findings, key=lambda f: SEVERITIES.index(f.severity)):
            lines.append(f"- **{f.severity.upper()}** {f.message}. *What to do:* {f.advice}")
    return "\n".join(lines).rstrip() + "\n"


def memorize_section(result) -> Section:
    """Step 1 from an OverfitResult (erroranalysis.checklist.overfit.overfit_check)."""
    from erroranalysis.checklist.overfit_diagnosis import ascii_curve

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


def training_sections(log, note: str) -> list[Section]:
    """Steps 2 and 3 from a TrainingLog (or None, with `note` saying why there is none)."""
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


def classes_section(metrics: dict) -> Section:
    """Step 4 from metrics.json."""
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


def examples_section(preds, metrics: dict, clusters, slices, slice_note: str, run: Path) -> Section:
    """Step 5 from the predictions (with confidence, loss, truncated), metrics.json, clusters.parquet and
    slices.parquet (each None when the run has none; `slice_note` says why) of the run directory `run`."""
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
    clusters = _cluster_rows(clusters)
    if clusters:
        parts.append("Error clusters, largest first:\n\n" + _table(["cluster", "size", "name"], clusters))
    slice_rows = _slice_rows(slices)
    slice_note = slice_note or ("No slice stands out." if slices is not None else "")
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
    parts.append(f"Browse them all: `erroranalysis show {run}` or `erroranalysis ui {run.parent}`.")
    summary = f"{len(failures)} failures" + (f"; {len(clusters)} error clusters" if clusters else "") + (
        f"; top slice: {slice_rows[0][0]} (error rate {slice_rows[0][2]})" if slice_rows else "")
    return Section("examples", "Which examples fail?", _status(findings, info_is="ok"), summary, findings,
                   "\n\n".join(parts))


def _cluster_rows(frame) -> list[tuple]:
    if frame is None:
        return []
    frame = frame[frame["cluster_id"] >= 0].sort_values("size", ascending=False).head(8)
    return [(str(r["cluster_id"]), str(r["size"]), _snippet(str(r.get("name", "")), 80)) for _, r in frame.iterrows()]


def _slice_rows(frame) -> list[tuple]:
    if frame is None:
        return []
    return [(_snippet(str(r["description"]), 60), str(int(r["support"])), f"{r['error_rate']:.0%}",
             f"{r['lift']:.1f}x") for _, r in frame.head(5).iterrows()]


def labels_section(report: dict, texts, checks_file: Path) -> Section:
    """Step 6 from checks.json; `texts` maps example ids to texts (for the suspects), `checks_file` is the run's
    checks.parquet."""
    findings = [Finding(f["check"], f["severity"], tuple(f["steps"]), f["message"], f["advice"])
                for f in report["findings"]]
    parts = []
    issues = report["label_issues"]
    if issues.get("available"):
        rows = [(t["example_id"], t["label"], t["suggested_label"], f"{t['score']:.2f}",
                 _snippet(str(texts.get(t["example_id"], "")))) for t in issues["top"][:8]]
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
    parts.append(f"Per example: `{checks_file}`.")
    real = [f for f in findings if f.check != "label_issues_skipped"]
    summary = _findings_summary(real, "no label, duplicate or leakage problems found")
    return Section("labels", "Is the label or the objective wrong?", _status(real), summary, findings,
                   "\n\n".join(parts))


def next_steps(sections: list[Section], run: Path) -> list[str]:
    """The checklist's order decides: the first broken step is the first thing to fix."""
    steps = []
    for number, section in enumerate(sections, start=1):
        for finding in section.findings:
            if finding.severity in ("error", "warning") and finding.check not in ("not_memorized",):
                steps.append(f"**{section.title}** (step {number}) {_sentence(finding.message)} {finding.advice}")
                break
    if sections[0].status == "problem" and not any("(step 1)" in step for step in steps):
        steps.insert(0, f"**{sections[0].title}** (step 1) Fix the training setup before anything else.")
    steps.append(f"Browse the failures and label error types: `erroranalysis ui {run.parent}`.")
    return steps[:6]


def _status(findings: list[Finding], info_is: str = "ok") -> str:
    severities = {f.severity for f in findings}
    if "error" in severities:
        return "problem"
    if "warning" in severities:
        return "warning"
    return info_is


def _findings_summary(findings: list[Finding], healthy: str) -> str:
    serious = [f for f in findings if f.severity != "info"] or findings
    if not serious:
        return healthy
    first = sorted(serious, key=lambda f: SEVERITIES.index(f.severity))[0].message
    return first + (f" (+{len(serious) - 1} more)" if len(serious) > 1 else "")


def _table(header: list[str], rows: list[tuple]) -> str:
    def cell(value) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _sentence(text: str) -> str:
    text = text.strip()
    return (text[:1].upper() + text[1:]).rstrip(".") + "."


def _snippet(text: str, limit: int = 100) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _finite(value) -> float:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return -math.inf
    return value if math.isfinite(value) else -math.inf


def _num(value) -> str:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return "-"
    return f"{value:.4g}" if math.isfinite(value) else "-"


# The helpers the causal-LM sections (checklist.doctor_llm) share with these.
status_of, findings_summary, md_table, snippet, num = _status, _findings_summary, _table, _snippet, _num
