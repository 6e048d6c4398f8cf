"""The data-checks report (checks.json): summaries of label issues and leakage, the counts, and plain-language
findings (label issues, duplicates, leakage, shift). Pure functions over the checks' outputs."""

from __future__ import annotations

import numpy as np

from erroranalysis.core.findings import SEVERITIES, Finding

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


def label_issues_skipped(task: str, has_probs: bool) -> dict:
    """checks.json's label-issue section of a run whose label issues are not computed: why (both engines)."""
    if task == "regression":  # cleanlab's regression label issues refit a model (CleanLearning): not here
        return {"available": False, "reason": "label issues are not computed for a regression run (cleanlab's "
                "regression check refits a model on the data)"}
    if not has_probs:
        return {"available": False, "reason": "the run has no probabilities (probs.npy)"}
    return {"available": False, "reason": "label issues need at least two classes (and examples)"}


def label_issue_summary(issues, ids, gold, correct, probs, method, filter_by, limit: int = 20) -> dict:
    scores = issues["label_issue_score"].to_numpy()
    if probs is None or not np.isfinite(scores).any():
        return label_issues_skipped("", probs is not None)
    flags = issues["label_issue"].to_numpy(dtype=bool, na_value=False)
    failures = ~np.asarray(correct, dtype=bool)
    order = np.argsort(-scores, kind="stable")[:limit]
    return {
        "available": True, "method": method, "filter_by": filter_by,
        "n_flagged": int(flags.sum()), "share_flagged": float(flags.mean()) if len(flags) else 0.0,
        "n_failures": int(failures.sum()), "n_failures_flagged": int((flags & failures).sum()),
        "share_of_failures_flagged": float((flags & failures).sum() / failures.sum()) if failures.any() else 0.0,
        "top": [{"example_id": str(ids[i]), "label": str(gold[i]),
                 "suggested_label": str(issues["suggested_label"].iat[i]), "score": float(scores[i]),
                 "label_issue": bool(flags[i])} for i in order],
    }


def leakage_summary(leak, ids, gold, train_ids, train_labels, train_set, near: bool, limit: int = 20) -> dict:
    hit = leak["in_train"].to_numpy()
    kinds = leak["train_kind"].to_numpy()
    differs = leak["train_label_differs"].to_numpy()
    rows = np.flatnonzero(hit)
    order = rows[np.lexsort((-leak["train_similarity"].to_numpy()[rows], ~differs[rows]))][:limit]
    return {
        "train_path": str(train_set.path), "n_train": len(train_set), "near": near,
        "n_in_train": int(hit.sum()), "share_in_train": float(hit.mean()) if len(hit) else 0.0,
        "n_exact": int((kinds == "exact").sum()), "n_near": int((kinds == "near").sum()),
        "n_label_differs": int(differs.sum()),
        "examples": [{"example_id": str(ids[i]), "label": str(gold[i]),
                      "train_id": str(train_ids[leak["train_index"].iat[i]]),
                      "train_label": str(train_labels[leak["train_index"].iat[i]]),
                      "kind": str(kinds[i]), "similarity": float(leak["train_similarity"].iat[i])} for i in order],
    }


def summary(report: dict) -> dict:
    issues = report["label_issues"]
    leak, shift = report.get("leakage"), report.get("shift")
    domain = (shift or {}).get("domain") or {}
    return {
        "n_examples": report["n_examples"],
        "n_label_issues": issues.get("n_flagged") if issues.get("available") else None,
        "n_duplicate_groups": report["duplicates"]["n_groups"],
        "n_conflict_groups": report["duplicates"]["n_conflict_groups"],
        "n_in_train": leak["n_in_train"] if leak else None,
        "domain_auc": domain.get("auc"),
        **_contamination_summary(report.get("contamination")),
        "findings": report["findings"],
    }


def _contamination_summary(section: dict | None) -> dict:
    """The counts of a generation run's contamination section (None without one)."""
    if not section:
        return {"n_contaminated": None}
    metrics = section["metrics"]
    return {"n_contaminated": section["n_contaminated"], "ngram": section["ngram"],
            "pass_rate_clean": metrics["clean"]["pass_rate"],
            "pass_rate_contaminated": metrics["contaminated"]["pass_rate"],
            "n_train_near_duplicate_groups": (section.get("near_duplicates") or {}).get("n_groups")}
