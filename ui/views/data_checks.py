"""Data checks: is the label or the data wrong? Findings of the checks stage (label issues, duplicates, train/eval
leakage, shift; on a generation run checked with a training file, contamination with the metrics on clean and
contaminated examples, near-duplicate training prompts and lengths), the examples whose gold label is most probably
wrong, and the doctor's report when there is one."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from erroranalysis.core.errors import UserError
from erroranalysis_ui.eaui import components as ui
from erroranalysis_ui.eaui import data, labeled, tables

SEVERITY_ICON = {"error": ":material/error:", "warning": ":material/warning:", "info": ":material/info:"}

current = ui.current_run()
ui.header("Data checks", current, "is the label or the data wrong before the model is?")

with ui.guard("Run `erroranalysis data-checks RUN` again."):
    found = data.checks(current.path)
if found is None:
    st.info(f"The data checks have not run on this run: `erroranalysis data-checks {current.path}` "
            "(add `--train FILE` for train/eval leakage and shift).", icon=":material/fact_check:")
else:
    report, table = found
    for finding in report.get("findings", []):
        with st.container(border=True):
            st.markdown(f"{SEVERITY_ICON.get(finding.get('severity'), '')} **{ui.md(finding.get('check', ''))}**: "
                        f"{ui.md(finding.get('message', ''))}")
            if finding.get("advice"):
                st.caption(ui.md(finding["advice"]))
    if not report.get("findings"):
        st.success("No data problem found.", icon=":material/check_circle:")

    if report.get("contamination"):
        section = report["contamination"]
        st.subheader("Contamination with the training data", anchor=False)
        st.caption(f"{ui.count(section['n_contaminated'])} of {ui.count(section['n_examples'])} eval examples "
                   f"share a {section['ngram']}-gram (lowercased, punctuation removed) with one of the "
                   f"{ui.count(section['n_train'])} training rows. Does the score come from leaks?")
        parts = section["metrics"]
        st.dataframe(pd.DataFrame([{"examples": name, "n": parts[name]["n"],
                                    "pass rate": ui.pct(parts[name]["pass_rate"]),
                                    "mean reference loss": parts[name].get("mean_reference_loss"),
                                    "mean score": parts[name].get("mean_score")}
                                   for name in ("all", "clean", "contaminated")]), hide_index=True)
        if section["examples"]:
            st.dataframe(pd.DataFrame(section["examples"]), hide_index=True, height=300)
        near = section.get("near_duplicates") or {}
        if near.get("groups"):
            st.markdown(f"**Near-duplicate training prompts**: {ui.count(near['n_rows_in_groups'])} rows in "
                        f"{ui.count(near['n_groups'])} groups (Jaccard >= {near['threshold']}, MinHash LSH)")
            st.dataframe(pd.DataFrame(near["groups"]), hide_index=True, height=240)
        lengths = section.get("lengths") or {}
        rows = [{"unit": unit, "side": side, **lengths[unit][side]} for unit in ("words", "tokens")
                if lengths.get(unit) for side in ("train", "eval")]
        if rows:
            st.markdown("**Prompt lengths, training against eval**")
            st.dataframe(pd.DataFrame(rows), hide_index=True)

    st.subheader("Probable label issues", anchor=False)
    issues = report.get("label_issues") or {}
    if not issues.get("available", True):  # no probabilities (a generation run, analyze without prob_ columns)
        st.caption(f"Not checked: {ui.md(issues.get('reason') or 'label-issue detection did not run')}.")
    else:
        with ui.guard():
            examples = labeled.examples(current.path, ui.labels())
        scored = table[["example_id", "label_issue_score", "suggested_label"]].astype({"example_id": str})
        scored = scored[tables.flag(table["label_issue"])]
        suspects = examples.merge(scored, on="example_id").sort_values("label_issue_score", ascending=False)
        st.caption(f"{len(suspects):,} examples whose given label is probably wrong (confident learning), most "
                   "suspicious first; `suggested_label` is the model's view. Flag them on the Label page.")
        tables.examples_table(suspects, height=360, hide=("note",))

try:
    report_md = data.doctor_report(current.path)
except UserError as exc:  # damaged, or a link out of the app's folders: the checks above still stand
    report_md = None
    ui.problem(exc)
if report_md:
    with st.expander("Doctor's report (doctor.md)", icon=":material/stethoscope:"):
        st.markdown(report_md)
