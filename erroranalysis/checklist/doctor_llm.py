"""The doctor's sections for a causal LM (`doctor --task generation`): memorizing SFT answers, which outputs
fail their checks, which examples fail, and the training data (contamination, near-duplicate prompts, lengths).
Pure functions over the results the stages made; the training-log sections are the classifier's."""

from __future__ import annotations

from erroranalysis.checklist.doctor_report import Section, findings_summary, md_table, num, snippet, status_of
from erroranalysis.core.findings import Finding

LOW_PASS_RATE = 0.5
LENGTH_STOPS_NOTABLE = 0.2  # share of failures that stopped at max_new_tokens worth a finding


def memorize_section(result) -> Section:
    """Step 1 from an `overfit_lm.LMOverfitResult`."""
    from erroranalysis.checklist.overfit_diagnosis import ascii_curve

    c = result.curve
    reproduced = sum(e["reproduced"] for e in result.examples)
    findings = [f for f in result.findings if f.check != "memorized"]
    if result.memorized:
        summary = f"memorized {result.n} SFT answers in {result.steps_run} steps (greedy decoding reproduces " \
                  f"{reproduced} of {result.n})"
    else:
        summary = findings_summary(findings, f"did not memorize {result.n} SFT answers")
    missed = [e for e in result.examples if not e["reproduced"]][:5]
    body = (f"{result.n} rows of the training file, loss on {result.masking}, {result.steps_run} steps at lr "
            f"{result.lr:g}, batch {result.batch_size}, max_length {result.max_length}"
            f"{', LoRA' if result.lora else ''}; {result.params['trainable']:,} of {result.params['total']:,} "
            f"parameters trained.\n\nAnswer loss {num(c.initial_loss)} -> {num(c.final_loss)} `{ascii_curve(c.eval_loss)}`")
    if missed:
        body += "\n\n" + md_table(["row", "answer", "greedy output", "answer loss"],
                                  [(e["row"], snippet(e["answer"], 60), snippet(e["output"], 60), num(e["final_loss"]))
                                   for e in missed])
    status = status_of(findings)  # not_memorized is an error: a problem
    return Section("memorize", "Can it memorize a few SFT answers?", status, summary, result.findings, body)


def outputs_section(metrics: dict) -> Section:
    """Step 4 for generation: the output checks' pass rates (metrics.json "output_checks")."""
    oc = metrics.get("output_checks") or {}
    n, failed = oc.get("n", 0), oc.get("n_failed", 0)
    findings = []
    for check in oc.get("per_check", []):
        if check["applied"] and check["pass_rate"] is not None and check["pass_rate"] < LOW_PASS_RATE:
            findings.append(Finding("low_pass_rate", "warning", (),
                                    f"the {check['check']} check passes on {check['pass_rate']:.0%} of the "
                                    f"{check['applied']} outputs it applies to",
                                    "Read the failure reasons below and a few failing outputs before changing the "
                                    "model: a format the prompt does not ask for fails every checker."))
    stops = {s["stop_reason"]: s for s in oc.get("per_stop_reason", [])}
    cut = stops.get("length")
    if cut and failed and cut["n"] * (1 - (cut["pass_rate"] or 0)) / failed >= LENGTH_STOPS_NOTABLE:
        findings.append(Finding("outputs_cut", "warning", (),
                                f"{cut['n']} outputs stopped at max_new_tokens ({cut['pass_rate'] or 0:.0%} of them "
                                "pass)", "Raise --max-new-tokens, or ask for shorter answers in the prompt."))
    rate = oc.get("pass_rate")
    summary = findings_summary(findings, f"{failed} of {n} outputs fail their checks" if failed else
                               f"all {n} outputs pass their checks")
    rows = [(c["check"], c["applied"], "-" if c["pass_rate"] is None else f"{c['pass_rate']:.1%}")
            for c in oc.get("per_check", [])]
    body = f"Pass rate {'-' if rate is None else f'{rate:.1%}'} over {n} prompts.\n\n" + md_table(
        ["check", "applied", "pass rate"], rows)
    reasons = oc.get("failure_reasons") or []
    if reasons:
        body += "\n\n" + md_table(["failure reason", "count", "share of failures"],
                                  [(r["reason"], r["count"], f"{r['share_of_failures']:.0%}") for r in reasons[:8]])
    return Section("classes", "Which outputs fail?", status_of(findings, "ok"), summary, findings, body)


def failures_section(preds, metrics: dict) -> Section:
    """Step 5 for generation: the failures whose reference the model finds likely ("low loss but failing"), and
    the failures with the highest reference loss."""
    loss = (metrics.get("output_checks") or {}).get("loss") or {}
    failing = preds[~preds["correct"].astype(bool)]
    findings = []
    low = loss.get("low_loss_failures") or 0
    if low:
        findings.append(Finding("low_loss_failures", "info", (),
                                f"{low} failing outputs come from prompts whose reference the model finds likely (loss "
                                "at or below the passing examples' median)",
                                "The model knows these answers but writes something else: look at decoding "
                                "(stop strings, max_new_tokens, the chat template) before training more."))
    summary = f"{len(failing)} failing outputs" + (f", {low} with a low reference loss" if low else "")
    body = ""
    if len(failing) and "reference_loss" in failing:
        top = failing.sort_values("reference_loss", ascending=False, na_position="last").head(8)
        body = md_table(["example", "failure", "reference loss", "output"],
                        [(r.example_id, snippet(r.failure_reason, 50), num(r.reference_loss), snippet(r.output, 60))
                         for r in top.itertuples()])
    return Section("examples", "Which examples fail?", status_of(findings, "ok"), summary, findings, body)


def data_section(report: dict | None, train: str | None) -> Section:
    """Step 6 for generation: the data checks' findings, with contamination against the training file."""
    title = "Is the data wrong? Contamination, duplicates, lengths"
    if report is None:
        return Section("labels", title, "skipped", "the data checks did not run")
    findings = [Finding(f["check"], f["severity"], tuple(f.get("steps", ())), f["message"], f["advice"])
                for f in report.get("findings", []) if f["check"] != "label_issues_skipped"]
    section = report.get("contamination")
    if section:
        parts = section["metrics"]
        body = md_table(["examples", "n", "pass rate"],
                        [(name, parts[name]["n"], "-" if parts[name]["pass_rate"] is None
                          else f"{parts[name]['pass_rate']:.1%}") for name in ("all", "clean", "contaminated")])
        healthy = f"no eval prompt shares a {section['ngram']}-gram with the {section['n_train']} training rows"
    else:
        body = "No training file (--train): contamination was not checked."
        healthy = "no duplicate problem" + ("" if train else "; contamination not checked (no --train)")
    return Section("labels", title, status_of(findings, "ok"), findings_summary(findings, healthy), findings, body)
