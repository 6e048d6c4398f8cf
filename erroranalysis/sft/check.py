"""sft-check over a whole file: render (or read) every row, truncate as the trainer will, run the detectors, and
table the findings, the rows (their trained spans, for the terminal and the app) and the summary.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from erroranalysis.sft import detect, render
from erroranalysis.sft.params import SftParams

MASKED, TRAINED, CUT = 0, 1, 2  # segment states: no label, a label, beyond max_length


@dataclass
class SftResult:
    findings: pd.DataFrame  # row, line, kind, detail (+ source)
    rows: pd.DataFrame  # row, line, source, n_tokens, n_trained, kinds, segments, segment_state
    summary: dict


def check(rows, tokens, params: SftParams, tokenized=None, progress: Callable[[int, int], None] | None = None
          ) -> SftResult:
    """The findings of every row of `rows` (SftRows) under `tokens` (sft.tokenizer.Tokens); `tokenized`: the
    user's own TokenizedRow list, checked instead of our rendering."""
    mode = params.effective_mode(rows.format)
    reference = render.render(rows, tokens, mode)
    answers = rows.answers()
    found, table, hashes = [], [], []
    for i, ref in enumerate(reference):
        view, shifted, mismatch = _view(i, ref, rows, tokens, params, tokenized)
        kinds = detect.check_row(view, mode=mode, max_length=params.max_length, stop_ids=tokens.stop_ids,
                                 bos_id=tokens.bos_id, answers=answers[i], conversational=rows.conversational,
                                 text_rows=rows.format == "text", shifted=shifted, mismatch=mismatch)
        full_ids = tokenized[i].ids if tokenized is not None else ref.ids
        hashes.append(detect.row_hash(full_ids))
        found.extend((i, kind, detail) for kind, detail in kinds)
        table.append(_row_entry(i, rows, None if tokenized is not None else ref, view, full_ids, tokens,
                                [k for k, _ in kinds]))
        if progress is not None and (i + 1) % 1000 == 0:
            progress(i + 1, len(reference))
    for row, first in detect.duplicates(hashes).items():
        found.append((row, "duplicate_row", f"the same tokens as row {first}"))
        table[row]["kinds"].append("duplicate_row")
    findings = _findings_frame(found, rows)
    frame = pd.DataFrame(table)
    return SftResult(findings, frame, summarize(rows, tokens, params, mode, findings, frame, tokenized is not None))


def _view(i, ref, rows, tokens, params, tokenized):
    """(RowView, labels_shifted detail, template_mismatch detail) of row i."""
    keep = params.max_length
    mismatch = None
    if tokenized is None:
        ids, trained, roles, shifted = ref.ids, ref.trained, ref.roles, None
        if rows.texts is not None and rows.conversational:  # the user's own rendering beside the conversation
            mismatch = text_mismatch(rows.texts[i], ref.text)
    else:
        from erroranalysis.sft.tokenized import align, unshift

        given = tokenized[i]
        ids = given.ids
        shifted = detect.labels_shifted(ids, given.labels)
        trained = unshift(given.labels) if shifted else given.labels != -100
        roles, mismatch = align(ref.ids, ref.roles, ids, tokens.tokenizer)
    n_full = len(ids)
    # answer tokens of the whole row: our rendering's, or where the user's tokens are another rendering, theirs
    answer_full = detect.answer_tokens(roles if tokenized is not None and mismatch else ref.roles,
                                       ids if tokenized is not None and mismatch else ref.ids, tokens.stop_ids)
    view = detect.RowView(ids[:keep], trained[:keep], roles[:keep], n_full, answer_full)
    return view, shifted, mismatch


def text_mismatch(given: str, rendered: str) -> str | None:
    """Where the row's `text` first differs from the chat template's rendering of its conversation."""
    if given == rendered:
        return None
    n = min(len(given), len(rendered))
    at = next((k for k in range(n) if given[k] != rendered[k]), n)
    return (f"text differs from the chat template at character {at}: {given[at:at + 24]!r} where the template "
            f"gives {rendered[at:at + 24]!r}")


def _row_entry(i, rows, ref, view, full_ids, tokens, kinds: list[str]) -> dict:
    """Row i of sft_rows.parquet; `ref`: our rendering, whose text gives the spans (None: decode the user's ids)."""
    segments, states = spans(ref, full_ids, view, tokens.tokenizer)
    return {"row": i, "line": int(rows.lines[i]), "source": rows.sources[i] if rows.sources is not None else None,
            "n_tokens": int(view.n_full), "n_trained": int(np.count_nonzero(view.trained)), "kinds": kinds,
            "segments": segments, "segment_state": states}


def spans(ref, full_ids: np.ndarray, view, tokenizer) -> tuple[list[str], list[int]]:
    """The row's text as runs of tokens that share a state (masked, trained, cut by max_length): from the rendered
    text and its offsets when we rendered it, else decoded from the ids."""
    n = len(full_ids)
    state = np.full(n, CUT, dtype=np.int8)
    state[:len(view.trained)] = np.where(view.trained, TRAINED, MASKED)
    if n == 0:
        return [], []
    edges = np.flatnonzero(np.diff(state)) + 1
    starts = np.concatenate([[0], edges])
    stops = np.concatenate([edges, [n]])
    texts = []
    for a, b in zip(starts, stops):
        if ref is not None and ref.offsets is not None:
            begin = int(ref.offsets[a][0]) if a > 0 else 0
            end = int(ref.offsets[b][0]) if b < n else len(ref.text)
            texts.append(ref.text[begin:end])
        else:
            texts.append(tokenizer.decode([int(t) for t in full_ids[a:b]], skip_special_tokens=False))
    return texts, [int(state[a]) for a in starts]


def _findings_frame(found, rows) -> pd.DataFrame:
    order = {k: j for j, k in enumerate(detect.KINDS)}
    found = sorted(found, key=lambda f: (f[0], order[f[1]]))
    frame = pd.DataFrame(found, columns=["row", "kind", "detail"]).astype({"row": "int64", "kind": "object",
                                                                           "detail": "object"})
    frame.insert(1, "line", rows.lines[frame["row"].to_numpy(dtype=np.int64)] if len(frame) else
                 np.zeros(0, dtype=np.int64))
    if rows.sources is not None:
        frame["source"] = [rows.sources[r] for r in frame["row"]]
    return frame


def stats(values: np.ndarray) -> dict:
    if len(values) == 0:
        return {"mean": None, "min": None, "p50": None, "p95": None, "max": None, "total": 0}
    return {"mean": round(float(values.mean()), 2), "min": int(values.min()), "p50": float(np.percentile(values, 50)),
            "p95": float(np.percentile(values, 95)), "max": int(values.max()), "total": int(values.sum())}


def summarize(rows, tokens, params: SftParams, mode: str, findings: pd.DataFrame, table: pd.DataFrame,
              tokenized: bool) -> dict:
    counts = Counter(findings["kind"])
    n_tokens = table["n_tokens"].to_numpy(dtype=np.int64)
    kept = np.minimum(n_tokens, params.max_length) if params.max_length is not None else n_tokens
    trained = table["n_trained"].to_numpy(dtype=np.int64)
    summary = {
        "rows": len(rows), "format": rows.format, "conversational": rows.conversational, "mode": mode,
        "mode_asked": params.mode, "max_length": params.max_length, "input": "tokenized" if tokenized else "rendered",
        "tokenizer": tokens.describe(),
        "counts": {kind: int(counts.get(kind, 0)) for kind in detect.KINDS},
        "rows_with_findings": int(findings["row"].nunique()) if len(findings) else 0,
        "tokens_per_row": stats(n_tokens), "kept_tokens_per_row": stats(kept),
        "trained_tokens_per_row": stats(trained),
        "trained_share": round(float(trained.sum() / kept.sum()), 4) if kept.sum() else 0.0,
        "meanings": dict(detect.MEANINGS), "notes": notes(rows, tokens, mode),
    }
    if rows.sources is not None:
        summary["sources"] = per_source(table, trained)
    return summary


def per_source(table: pd.DataFrame, trained: np.ndarray) -> dict:
    """Rows, tokens and trained tokens per source, and each source's share of all trained tokens: the data
    mixture as the loss sees it (a source of long answers weighs more than its share of rows)."""
    total = int(trained.sum())
    out = {}
    for source, part in table.groupby("source", sort=True):
        t = int(part["n_trained"].sum())
        out[str(source)] = {"rows": int(len(part)), "share_of_rows": round(len(part) / len(table), 4),
                            "tokens": int(part["n_tokens"].sum()), "trained_tokens": t,
                            "share_of_trained": round(t / total, 4) if total else 0.0}
    return out


def notes(rows, tokens, mode: str) -> list[str]:
    """What holds for the whole file, beside the row findings."""
    out = []
    if mode == "assistant-only" and not tokens.generation_tags:
        out.append("the chat template has no {% generation %} markers: TRL's assistant_only_loss swaps in a training "
                   "template for the families it knows and refuses any other; the masks here are the assistant "
                   "turns (their text and end-of-turn token) as such a template marks them")
    if mode == "completion-only" and rows.format != "prompt_completion":
        out.append(f"completion_only_loss does nothing to {rows.format} rows in TRL: every token is trained; use "
                   "prompt/completion rows, or --assistant-only for conversations")
    if tokens.pad_id is not None and tokens.pad_id == tokens.eos_id:
        out.append("the pad token is the EOS token: a collator that masks pad ids (labels[ids == pad] = -100) masks "
                   "every EOS too; TRL masks padding by position, not by id")
    return out
