"""A generation run as an LLM engineer reads it (lm-eval's table and Inspect's per-scorer summary are the models):
the Overview's checks, failure modes with an exemplar, per task or filter, stop reasons, lengths and loss; a
generation exemplar on the Clusters page, its output and failing checks first and its prompt folded. Rendering
only: the figures are metrics.json's `output_checks` and the rows predictions.parquet's."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from erroranalysis.metrics.display import output_length
from erroranalysis.metrics.generation import pooled_filters
from erroranalysis_ui.eaui import charts
from erroranalysis_ui.eaui import components as ui

OUTPUT_CHARS = 1200  # characters of an exemplar's output shown before "…"


def is_generation(metrics: dict) -> bool:
    return bool(metrics.get("output_checks"))


def overview(metrics: dict) -> None:
    """The headline figures, then checks, groups and failure modes (left), stop reasons, lengths and loss (right)."""
    checks = metrics["output_checks"]
    loss = checks.get("loss") or {}
    length = checks.get("output_length") or {}
    filters = pooled_filters(checks)
    with ui.figures():
        if filters > 1:
            ui.figure("Filters", str(filters), "Each document is a row per filter: read the pass rates per filter "
                      "below; a rate pooled over filters would count every document several times.")
        else:
            ui.figure("Passed every check", ui.pct(checks.get("pass_rate")),
                      f"{ui.count(checks.get('n_passed'))} of {ui.count(checks.get('n'))} outputs pass all their "
                      "checks.")
        ui.figure("Failing outputs", ui.count(checks.get("n_failed")), f"of {ui.count(checks.get('n'))} examples")
        ui.figure("Checks applied", str(len(checks.get("per_check") or [])),
                  ", ".join(c["check"] for c in checks.get("per_check") or []) or "none")
        stopped = length.get("at_limit") if length.get("limit") else length.get("stopped_by_length")
        if stopped is not None:
            ui.figure("Cut off at the limit", ui.count(stopped),
                      f"outputs that reached max_new_tokens ({length['limit']})" if length.get("limit")
                      else "outputs whose stop reason is 'length'")
        if (loss.get("reference_loss") or {}).get("mean") is not None:
            ui.figure("Low loss but failing", ui.count(loss.get("low_loss_failures")),
                      "Failing outputs whose reference loss is at most the passing ones' median.")
    left, right = st.columns([3, 2], gap="large")
    with left:
        _per_check(checks)
        _per_group(checks)
        _failure_modes(checks)
    with right:
        _stops(checks)
        _loss(loss)


def _per_check(checks: dict) -> None:
    st.subheader("Output checks", anchor=False)
    rows = pd.DataFrame(checks.get("per_check") or [])
    if rows.empty:
        st.caption("No checks in metrics.json.")
        return
    st.dataframe(rows, hide_index=True, column_order=["check", "applied", "passed", "pass_rate"],
                 column_config={"check": "Check",
                                "applied": st.column_config.NumberColumn("Applied", format="localized"),
                                "passed": st.column_config.NumberColumn("Passed", format="localized"),
                                "pass_rate": st.column_config.ProgressColumn("Pass rate", format="percent",
                                                                             min_value=0, max_value=1)})
    st.caption("A check applies to a row when the row has its input (a schema, a reference, a label, ...).")


def _per_group(checks: dict) -> None:
    rows, columns = checks.get("per_group") or [], checks.get("group_columns") or []
    if not rows:
        return
    st.subheader("Per " + " and ".join(columns), anchor=False)
    table = pd.DataFrame([{**r["group"], "n": r["n"], "passed": r["n_passed"], "pass rate": r["pass_rate"],
                           **r["checks"]} for r in rows])
    names = [c for c in table.columns if c not in (*columns, "n", "passed", "pass rate")]
    st.dataframe(table, hide_index=True, column_config={
        "pass rate": st.column_config.ProgressColumn("Pass rate", format="percent", min_value=0, max_value=1),
        **{n: st.column_config.NumberColumn(n, format="percent") for n in names}})


def _failure_modes(checks: dict) -> None:
    st.subheader("Failure modes", anchor=False)
    modes = checks.get("failure_reasons") or []
    if not modes:
        st.caption("No failing output." if not checks.get("n_failed") else "No failure reasons in metrics.json.")
        return
    table = pd.DataFrame([{"reason": m["reason"], "count": m["count"], "share": m["share_of_failures"],
                           "exemplar": f"{(m.get('exemplar') or {}).get('example_id', '')}: "
                                       f"{(m.get('exemplar') or {}).get('output', '')}" if m.get("exemplar") else ""}
                          for m in modes])
    st.dataframe(table, hide_index=True, column_config={
        "reason": st.column_config.TextColumn("Failure reason", width="medium"),
        "count": st.column_config.NumberColumn("Failures", format="localized"),
        "share": st.column_config.ProgressColumn("Share of failures", format="percent", min_value=0, max_value=1),
        "exemplar": st.column_config.TextColumn("Exemplar (id: output)", width="large")})
    st.caption("Each check's reason without its details; an output may fail several ways. A check that only "
               "repeats another's failure (the schema check of an output that is not JSON) is not counted.")


def _stops(checks: dict) -> None:
    st.subheader("Stop reasons and length", anchor=False)
    stops = pd.DataFrame(checks.get("per_stop_reason") or [])
    if stops.empty:
        st.caption("No stop reasons recorded.")
    else:
        st.dataframe(stops, hide_index=True, column_order=[c for c in ("stop_reason", "n", "pass_rate",
                                                                        "mean_output_tokens") if c in stops],
                     column_config={"stop_reason": "Stop reason",
                                    "n": st.column_config.NumberColumn("Outputs", format="localized"),
                                    "pass_rate": st.column_config.NumberColumn("Pass rate", format="percent"),
                                    "mean_output_tokens": st.column_config.NumberColumn("Mean length",
                                                                                        format="%.3g")})
    length = checks.get("output_length") or {}
    if length.get("mean") is not None:
        sentence = output_length(length)
        st.caption(sentence[0].upper() + sentence[1:] + ".")


def _loss(loss: dict) -> None:
    rows = [{"loss": c, "passing": loss[c].get("mean_passed"), "failing": loss[c].get("mean_failed"),
             "all": loss[c].get("mean")} for c in ("reference_loss", "output_loss")
            if (loss.get(c) or {}).get("mean") is not None]
    if not rows:
        return
    st.subheader("Loss beside behaviour", anchor=False)
    st.dataframe(pd.DataFrame(rows), hide_index=True, column_config={
        c: st.column_config.NumberColumn(c.capitalize(), format="%.3g") for c in ("passing", "failing", "all")})
    ids = loss.get("low_loss_failure_ids") or []
    st.caption(f"{ui.count(loss.get('low_loss_failures'))} failing outputs have a low reference loss: the model "
               "finds the right answer likely, yet what it wrote fails a check"
               + (f" (lowest first: {ui.md(', '.join(ids[:8]))})." if ids else "."))


def failure_modes(rows, top: int = 4) -> list[dict]:
    """The failure reasons of `rows`' failing examples, most frequent first (as metrics.json counts them)."""
    from erroranalysis.metrics.generation import failure_modes as count_modes

    return count_modes(rows, rows["correct"].to_numpy(bool), top=top)


def failing_checks(ex) -> list[str]:
    """The failing checks' reasons of one example, less a reason that only repeats another's (no JSON to validate
    when the output is not JSON)."""
    from erroranalysis.metrics.generation import own_reasons

    failed = {str(k)[len("check_"):] for k, v in ex.items() if str(k).startswith("check_")
              and not str(k).endswith("_reason") and (v is False or v is np.False_)}
    return own_reasons(ex.get("failure_reason"), failed)


def exemplar(ex_id, ex) -> None:
    """A generation exemplar: its id, the failing checks and the output first; the prompt in a folded expander."""
    st.caption(f"{ui.md(ex_id)} · stop {ui.md(ex.get('stop_reason', '–'))} · "
               f"{ui.count(ex.get('n_output_tokens'))} output tokens")
    for reason in failing_checks(ex):
        st.markdown(f":red[:material/close:] {ui.md(reason)}")
    output = str(ex.get("output") or "")
    st.code(output if len(output) <= OUTPUT_CHARS else output[: OUTPUT_CHARS - 1] + "…", language=None,
            wrap_lines=True)
    with st.expander("Prompt", expanded=False):
        st.markdown(ui.md(charts.snippet(ex.get("prompt") or ex.get("text") or "", 2000)))
        if isinstance(ex.get("reference"), str) and ex.get("reference"):
            st.caption("Reference")
            st.code(ex["reference"], language=None, wrap_lines=True)
