"""Plain-language findings from a data-checks report: label issues, duplicates, leakage, shift.
"""

from __future__ import annotations

from erroranalysis.findings import SEVERITIES, Finding

# Shares behind the findings.
LABEL_ISSUE_NOTABLE = 0.05
LABEL_ISSUE_IMPLAUSIBLE = 0.25
DUPLICATE_NOTABLE = 0.05
LEAKAGE_SEVERE = 0.01


def checks_findings(report: dict) -> list[Finding]:
    """Plain-language findings over a checks report, most severe first (shift findings included)."""
    out: list[Finding] = []
    n = max(report["n_examples"], 1)
    issues = report["label_issues"]
    if not issues.get("available"):
        out.append(Finding("label_issues_skipped", "info", (),
                           f"label-issue detection skipped: {issues.get('reason', 'no probabilities')}",
                           "Give probabilities (prob_<label> columns with 'analyze', or use 'run') to rank "
                           "examples whose label is probably wrong."))
    elif issues["n_flagged"]:
        severity = "warning" if issues["share_flagged"] >= LABEL_ISSUE_NOTABLE else "info"
        advice = ("Review the top suspects (checks.parquet sorted by label_issue_score): fix the labels that are "
                  "wrong, and read those failures as label errors, not model errors.")
        if issues["share_flagged"] >= LABEL_ISSUE_IMPLAUSIBLE:
            advice = ("So many flags usually mean a weak model rather than bad labels (confident learning trusts "
                      "the model's probabilities): read a sample of the top suspects before relabeling, and trust "
                      "the flags once the model is accurate. " + advice)
        out.append(Finding(
            "label_issues", severity, (),
            f"{issues['n_flagged']} examples ({issues['share_flagged']:.1%}) probably carry a wrong label; "
            f"{issues['n_failures_flagged']} of them are counted as model failures "
            f"({issues['share_of_failures_flagged']:.0%} of the {issues['n_failures']} failures)", advice))
    dups = report["duplicates"]
    if dups["n_conflict_groups"]:
        out.append(Finding(
            "duplicate_conflicts", "warning", (),
            f"{dups['n_conflict_groups']} groups of duplicate texts carry different labels "
            f"({dups['n_examples_in_conflicts']} examples)",
            "The same input cannot have two gold labels: settle each group's label (or the labeling guideline), "
            "since at least one member counts as a failure whatever the model predicts."))
    if dups["n_redundant"]:
        share = dups["n_redundant"] / n
        out.append(Finding(
            "duplicates", "warning" if share >= DUPLICATE_NOTABLE else "info", (),
            f"{dups['n_examples_in_groups']} examples fall in {dups['n_groups']} duplicate groups "
            f"({dups['n_exact_groups']} exact, {dups['n_near_groups']} near): {dups['n_redundant']} "
            f"({share:.1%}) are redundant copies",
            "Metrics count each copy: deduplicate the eval set, or keep one example per group, before comparing "
            "models."))
    leak = report.get("leakage")
    if leak and leak["n_in_train"]:
        severity = "error" if leak["share_in_train"] >= LEAKAGE_SEVERE else "warning"
        out.append(Finding(
            "leakage", severity, (),
            f"{leak['n_in_train']} eval examples ({leak['share_in_train']:.1%}) also appear in the training data "
            f"({leak['n_exact']} exact, {leak['n_near']} near copies)",
            "Scores on these examples measure memory, not generalization: drop them from the eval set (or from "
            "training) and compare the metrics with and without them."))
        if leak["n_label_differs"]:
            out.append(Finding(
                "leakage_label_conflict", "warning", (),
                f"{leak['n_label_differs']} eval examples appear in training with a different label",
                "One of the two labels is wrong: fix it, since the model learned the training one."))
    shift = report.get("shift")
    if shift:
        out.extend(Finding(f["check"], f["severity"], tuple(f["steps"]), f["message"], f["advice"])
                   for f in shift["findings"])
    return sorted(out, key=lambda f: SEVERITIES.index(f.severity))
