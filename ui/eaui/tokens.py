"""Token-classification runs in the app: an example is a span (spans.parquet), shown in its sentence with every
gold span and every predicted span marked, the span itself in bold.

    if tokens.is_token_run(current.path):
        st.markdown(tokens.span_markup(current.path, example_row))
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from erroranalysis.metrics.averages import average_rows
from erroranalysis.metrics.tokens import spans_of
from erroranalysis.rundir import PREDICTIONS, readers
from erroranalysis_ui.eaui.components import md
from erroranalysis_ui.eaui.data import manifest, open_run, stamp

TASK = "token-classification"


def is_token_run(path: Path) -> bool:
    return manifest(path).get("task") == TASK


def sentences(path: Path):
    """The run's sentences (words, gold and predicted tags) by example id, cached on predictions.parquet's stamp."""
    return _sentences(str(path), stamp(Path(path) / PREDICTIONS))


@st.cache_resource(show_spinner=False, max_entries=8)
def _sentences(path: str, stamp_):
    frame = readers.read_predictions(open_run(path), columns=["tokens", "gold_tags", "pred_tags"])
    return frame.set_index("example_id")


def _marked(words: list[str], spans, color_of, focus: tuple[int, int] | None) -> str:
    out, i = [], 0
    for start, end, kind in sorted(spans):
        out += [md(w) for w in words[i:start]]
        text = md(" ".join(words[start:end]))
        if focus is not None and (start, end) == focus:
            text = f"**{text}**"
        out.append(f":{color_of(start, end, kind)}-background[{text} · {md(kind)}]")
        i = end
    out += [md(w) for w in words[i:]]
    return " ".join(out)


def span_markup(path: Path, example) -> str:
    """Markdown of the span's sentence, twice: gold spans (blue), predicted spans (green when a gold span has the
    same bounds and type, orange otherwise); the span `example` (a row of the example table) in bold."""
    setup = manifest(path).get("tokens") or {}
    scheme, mode = setup.get("scheme", "IOB2"), setup.get("span_mode", "default")
    table = sentences(path)
    sentence_id = str(example["sentence_id"])
    if sentence_id not in table.index:
        return md(example.get("context", example["text"]))
    row = table.loc[sentence_id]
    words = [str(w) for w in row["tokens"]]
    gold = spans_of([str(t) for t in row["gold_tags"]], scheme, mode)
    pred = spans_of([str(t) for t in row["pred_tags"]], scheme, mode)
    focus = (int(example["start"]), int(example["end"]))
    exact = set(gold)
    gold_line = _marked(words, gold, lambda s, e, k: "blue", focus)
    pred_line = _marked(words, pred, lambda s, e, k: "green" if (s, e, k) in exact else "orange", focus)
    kind = str(example.get("kind", "")).replace("_", " ")
    return (f"*{md(kind)}* · gold {md(example['label'])} → predicted {md(example['pred'])}  \n"
            f"**gold** {gold_line}  \n**predicted** {pred_line}")


def token_overview(metrics: dict) -> None:
    """The Overview of a token-classification run: entity scores, error spans by kind and by type, the word-level
    confusion of types (O included)."""
    import pandas as pd

    from erroranalysis_ui.eaui import components as ui

    o = metrics.get("overall", {})
    cols = st.columns(5)
    cols[0].metric("Entity micro F1", ui.pct(o.get("micro_f1")), border=True,
                   help=f"Exact spans (boundaries and type), seqeval's {o.get('span_mode', 'default')} mode.")
    cols[0].caption(f"P {ui.pct(o.get('precision'))} · R {ui.pct(o.get('recall'))}")
    cols[1].metric("Entity macro F1", ui.pct(o.get("macro_f1")), border=True, help="Unweighted mean over types.")
    cols[1].caption(f"weighted F1 {ui.pct(o.get('weighted_f1'))}")
    cols[2].metric("Token accuracy", ui.pct(o.get("token_accuracy")), border=True, help="Words with the gold tag.")
    cols[2].caption(f"of {ui.count(o.get('n_words'))} words")
    cols[3].metric("Error spans", ui.count(o.get("n_error_spans")), border=True,
                   help="Missed, spurious, wrong type, wrong boundary, wrong type and boundary.")
    cols[3].caption(f"{ui.count(o.get('n_gold_spans'))} gold spans")
    cols[4].metric("Sentences with errors", ui.count(o.get("n_failures")), border=True)
    cols[4].caption(f"of {ui.count(o.get('n'))} sentences")
    left, right = st.columns([3, 2], gap="large")
    with left:
        st.subheader("Per entity type")
        rows = []
        for r in metrics.get("per_class") or []:
            errors = r.get("errors") or {}
            rows.append({"type": r["label"], "precision": r["precision"] * 100, "recall": r["recall"] * 100,
                         "f1": r["f1"] * 100, "support": r["support"],
                         **{k.replace("_", " "): v for k, v in errors.items() if k != "correct"}})
        if rows:  # worst first, then seqeval's micro, macro and weighted averages
            shown = pd.concat([pd.DataFrame(rows).sort_values("f1"), pd.DataFrame(
                [{"type": a["label"], **{m: a[m] * 100 for m in ("precision", "recall", "f1")},
                  "support": a["support"]} for a in average_rows(TASK, metrics)])], ignore_index=True)
            st.dataframe(shown, hide_index=True, column_config={
                c: st.column_config.NumberColumn(c.capitalize() if c != "f1" else "F1", format="%.1f%%")
                for c in ("precision", "recall", "f1")})
        else:
            st.caption("No entity types in metrics.json.")
    with right:
        st.subheader("Error spans by kind")
        kinds = metrics.get("error_kinds") or {}
        st.dataframe(pd.DataFrame({"kind": [k.replace("_", " ") for k in kinds], "spans": list(kinds.values())}),
                     hide_index=True)
    confusion = metrics.get("confusion") or {}
    if confusion.get("labels"):
        st.subheader("Words: gold type × predicted type")
        st.caption("Each word's type (O outside any entity), rows gold, columns predicted.")
        st.dataframe(pd.DataFrame(confusion["matrix"], index=confusion["labels"], columns=confusion["labels"]))
