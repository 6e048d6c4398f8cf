"""The user's own tokenized rows (`input_ids`, `labels`, optional `attention_mask`, as their pipeline wrote them:
Parquet, JSONL or a `save_to_disk` folder; row i is row i of the data file), read and checked, and lined up with
our rendering of the same row so the checks know which of their tokens are prompt and which are answer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from erroranalysis.core.errors import DataError, preview, where
from erroranalysis.sft.render import TEMPLATE

IGNORE = -100


@dataclass
class TokenizedRow:
    ids: np.ndarray
    labels: np.ndarray
    padding: int  # tokens dropped because attention_mask is 0


def read_tokenized(path, n_rows: int, data_name: str) -> list[TokenizedRow]:
    from erroranalysis.sources.table import as_source, read_table

    source = as_source(path)
    frame, _ = read_table(source)
    name = str(source)
    columns = [c for c in frame.columns if c != "_line"]
    for column in ("input_ids", "labels"):
        if column not in columns:
            raise DataError(f"{name}: no {column!r} column (columns found: {preview(columns)}); --tokenized takes "
                            "the rows as the trainer gets them: input_ids, labels and optionally attention_mask.")
    if len(frame) != n_rows:
        raise DataError(f"{name}: {len(frame)} rows, but {data_name} has {n_rows}; row i of --tokenized must be row "
                        "i of --data.")
    masks = frame["attention_mask"].tolist() if "attention_mask" in columns else [None] * len(frame)
    out = []
    for ids, labels, mask, line in zip(frame["input_ids"], frame["labels"], masks, frame["_line"]):
        where_ = lambda column, line=int(line): where(name, line, column)  # noqa: E731
        ids = _ints(ids, where_("input_ids"))
        labels = _ints(labels, where_("labels"))
        if len(labels) != len(ids):
            raise DataError(f"{where_('labels')}: {len(labels)} labels for {len(ids)} input_ids; give one label per "
                            "token (-100 where no loss).")
        padding = 0
        if mask is not None:
            mask = _ints(mask, where_("attention_mask"))
            if len(mask) != len(ids) or not np.isin(mask, (0, 1)).all():
                raise DataError(f"{where_('attention_mask')}: expected {len(ids)} values of 0 or 1, one per "
                                "input id.")
            keep = mask.astype(bool)
            padding = int(len(ids) - np.count_nonzero(keep))
            ids, labels = ids[keep], labels[keep]
        out.append(TokenizedRow(ids, labels, padding))
    return out


def _ints(value, at: str) -> np.ndarray:
    if isinstance(value, np.ndarray) and value.dtype.kind in "iu":
        return value.astype(np.int64)
    items = value.tolist() if isinstance(value, np.ndarray) else value
    if not isinstance(items, list) or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool)
                                              for v in items):
        shown = type(value).__name__ if not isinstance(items, list) else "a list holding non-integers"
        raise DataError(f"{at}: holds {shown}; expected a list of token ids (integers).")
    return np.asarray(items, dtype=np.int64)


def unshift(labels: np.ndarray) -> np.ndarray:
    """Which tokens a shifted-by-hand label set trains: label i is meant for token i + 1."""
    trained = np.zeros(len(labels), dtype=bool)
    trained[1:] = labels[:-1] != IGNORE
    return trained


def align(reference: np.ndarray, ref_roles: np.ndarray, ids: np.ndarray, tokenizer) -> tuple[np.ndarray, str | None]:
    """The roles of the user's tokens taken from our rendering, and a template_mismatch detail when the tokens are
    not our rendering (or a start of it: a row cut by the user's pipeline is still the same rendering)."""
    n = min(len(ids), len(reference))
    same = np.flatnonzero(reference[:n] != ids[:n])
    if not len(same) and len(ids) <= len(reference):
        return ref_roles[:len(ids)].copy(), None
    at = int(same[0]) if len(same) else n
    detail = (f"token {at}: {_piece(tokenizer, ids, at)} where the chat template gives "
              f"{_piece(tokenizer, reference, at)}")
    from difflib import SequenceMatcher

    roles = np.full(len(ids), TEMPLATE, dtype=np.int8)
    for block in SequenceMatcher(None, reference.tolist(), ids.tolist(), autojunk=False).get_matching_blocks():
        roles[block.b:block.b + block.size] = ref_roles[block.a:block.a + block.size]
    return roles, detail


def _piece(tokenizer, ids: np.ndarray, at: int) -> str:
    if at >= len(ids):
        return "the end of the row"
    return repr(tokenizer.decode([int(ids[at])], skip_special_tokens=False))
