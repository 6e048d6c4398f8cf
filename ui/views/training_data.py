"""Training data: what the trainer will train on, from an `erroranalysis sft-check` run. The summary (rows, tokens,
trained tokens, the mixture per source), the findings by kind, and each row's text with its trained spans
highlighted: green is trained, grey has no label, struck red is cut by max_length."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from erroranalysis_ui.eaui import components as ui
from erroranalysis_ui.eaui import data, spans, state

PER_PAGE = 10

current = ui.current_run()
ui.header("Training data", current, "does the trainer train on what you think? (masks, truncation, EOS, template)")

with ui.guard("Run `erroranalysis sft-check` again."):
    found = data.sft(current.path)
if found is None:
    st.info("This run holds no training-data check. Make one with `erroranalysis sft-check --model TOKENIZER "
            "--data train.jsonl --out runs/sft` (add `--tokenized FILE` to check your own tokenized rows).",
            icon=":material/dataset:")
    st.stop()
summary, findings, rows = found

trained = summary["trained_tokens_per_row"]
cols = st.columns(5)
cols[0].metric("Rows", ui.count(summary["rows"]))
cols[1].metric("Rows with findings", ui.count(summary["rows_with_findings"]))
cols[2].metric("Tokens per row", f"{summary['tokens_per_row']['mean']:,.0f}" if summary["rows"] else "–")
cols[3].metric("Trained tokens per row", f"{trained['mean']:,.0f}" if summary["rows"] else "–")
cols[4].metric("Kept tokens trained", ui.pct(summary["trained_share"], 0))
tok = summary.get("tokenizer") or {}
st.caption(f"{ui.md(summary['format'])} rows, mode **{ui.md(summary['mode'])}**, max\\_length "
           f"{ui.md(summary['max_length'])}, {ui.md(summary['input'])} · tokenizer {ui.md(tok.get('path', ''))} "
           f"(EOS {ui.md(tok.get('eos_token'))}, pad {ui.md(tok.get('pad_token'))})")
for note in summary.get("notes", []):
    st.warning(ui.md(note), icon=":material/info:")

st.subheader("Findings by kind", anchor=False)
counts = {k: n for k, n in summary["counts"].items() if n}
if counts:
    table = pd.DataFrame({"kind": list(counts), "rows": list(counts.values()),
                          "what it means": [summary["meanings"].get(k, "") for k in counts]})
    st.dataframe(table, hide_index=True, width="stretch")
else:
    st.success("No finding: every row trains what it should.", icon=":material/check_circle:")

sources = summary.get("sources")
if sources:
    st.subheader("Data mixture as the loss sees it", anchor=False)
    mix = pd.DataFrame([{"source": name, **part} for name, part in sources.items()])
    st.dataframe(mix, hide_index=True, width="stretch", column_config={
        "share_of_rows": st.column_config.NumberColumn("share of rows", format="percent"),
        "share_of_trained": st.column_config.NumberColumn("share of trained tokens", format="percent")})

st.subheader("Rows", anchor=False)
choices = [""] + list(counts)
if st.session_state.get(state.SFT_KIND) not in choices:
    st.session_state[state.SFT_KIND] = ""
kind = st.selectbox("Show", choices, key=state.SFT_KIND,
                    format_func=lambda k: "every row" if not k else f"rows with {k} ({counts[k]:,})")
shown = rows if not kind else rows[rows["row"].isin(findings.loc[findings["kind"] == kind, "row"])]
pages = max(1, -(-len(shown) // PER_PAGE))
page = st.number_input(f"Page (of {pages})", min_value=1, max_value=pages, step=1, key=state.SFT_PAGE) \
    if pages > 1 else 1
st.caption(":green-background[trained] · :gray[no label] · :red-background[~~cut by max\\_length~~]")
details = findings.groupby("row")
for _, entry in shown.iloc[(int(page) - 1) * PER_PAGE:int(page) * PER_PAGE].iterrows():
    row = int(entry["row"])
    with st.container(border=True):
        where = f" (line {int(entry['line'])})" if "line" in entry and pd.notna(entry["line"]) else ""
        st.markdown(f"**Row {row}**{where}: {int(entry['n_tokens']):,} tokens, {int(entry['n_trained']):,} "
                    "trained")
        if row in details.groups:
            for _, f in details.get_group(row).iterrows():
                st.markdown(f":red[**{ui.md(f['kind'])}**] {ui.md(f['detail'])}")
        st.markdown(spans.row_markdown(entry["segments"], entry["segment_state"]))
