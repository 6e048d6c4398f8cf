"""Token-classification runs in the app: an example is a span (spans.parquet), shown in its sentence with every
gold span and every predicted span marked, the span itself in bold.

    if tokens.is_token_run(current.path):
        st.markdown(tokens.span_markup(current.path, example_row))
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

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
