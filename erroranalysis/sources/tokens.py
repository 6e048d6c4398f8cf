"""Token-classification eval sets: words and tags (CoNLL-style datasets: a `tokens` list and a `tags` list of names
or ids per row), or raw text with character-offset spans (`spans`: a list of `{start, end, label}`).

Every problem is one line naming the file, the line and the column, the value and the fix, as in `data.py`: tags
not one per token, a tag the model does not know, a span out of the text or overlapping another, a span that covers
no word. A span whose edge falls inside a word takes the whole word (words are the tokenizer's; counted in
`snapped`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from erroranalysis.core.errors import DataError, preview, where
from erroranalysis.metrics.tokens import encode_spans, spans_of
from erroranalysis.sources.table import DataOptions, EvalSet, InMemory, load_eval_set, read_table


@dataclass
class Sentences:
    """An eval set of sentences: `words` and `gold` (tag names) for word lists; `texts` and `char_spans` for raw
    text (its words come from the tokenizer, then `gold_from_spans` makes the tags)."""

    eval_set: EvalSet
    source: str
    lines: np.ndarray
    words: list[list[str]] | None = None
    gold: list[list[str]] | None = None
    texts: list[str] | None = None
    char_spans: list[list[tuple[int, int, str]]] | None = None
    column: str = ""  # the tags (or spans) column, for messages

    @property
    def raw(self) -> bool:
        return self.texts is not None

    def __len__(self) -> int:
        return len(self.eval_set)


def read_sentences(data: str | Path | InMemory, data_opts: DataOptions, tokens_column: str, tags_column: str,
                   spans_column: str, labels: Sequence[str], types: Sequence[str]) -> Sentences:
    """Read and check a token-classification eval set against the model's tags (`labels`) and entity types."""
    from erroranalysis.sources.table import as_source

    path = as_source(data)
    table = read_table(path, encoding=data_opts.encoding, split=data_opts.split)
    return sentences_of(path, table, data_opts, tokens_column, tags_column, spans_column, labels, types)


def block_sentences(source, start: int, rows: int, data_opts: DataOptions, tokens_column: str, tags_column: str,
                    spans_column: str, labels: Sequence[str], types: Sequence[str], *, sha256: str = "",
                    file=None) -> Sentences:
    """Rows start..start+rows of a Parquet eval set (`file`: it, or a JSONL/CSV file's `blocks.to_parquet` copy,
    open) read and checked as `read_sentences` reads the whole file: the same rules and one-line errors naming the
    user's file and line; ids default to the row number in the whole file, as in-process."""
    from erroranalysis.sources import blocks
    from erroranalysis.sources.table import as_source

    source = as_source(source)
    raw = blocks.read_rows(source, start, rows, file)
    sentences = sentences_of(source, (raw, blocks.format_of(source)), data_opts, tokens_column,
                             tags_column, spans_column, labels, types, sha256=sha256)
    if not data_opts.id_column:
        sentences.eval_set.frame["example_id"] = np.arange(start, start + len(raw)).astype(str).astype(object)
    return sentences


def gold_surfaces(sentences: Sentences, scheme: str, span_mode: str) -> set[str]:
    """The surfaces of the gold entities of `sentences` (a whole file, or a block of one): a span's words joined by
    spaces, or a raw text's characters. The one rule both engines use to mark spans `seen_in_train`."""
    if sentences.raw:
        return {text[s:e] for text, spans in zip(sentences.texts, sentences.char_spans) for s, e, _ in spans}
    return {" ".join(w[s:e]) for w, g in zip(sentences.words, sentences.gold)
            for s, e, _ in spans_of(g, scheme, span_mode)}


def sentences_of(path, table, data_opts: DataOptions, tokens_column: str, tags_column: str, spans_column: str,
                 labels: Sequence[str], types: Sequence[str], sha256: str | None = None) -> Sentences:
    """The sentences of `table` (a frame with `_line` and its format: a whole file, or a block of one), checked."""
    columns = [c for c in table[0].columns if c != "_line"]
    if tokens_column in columns:
        if tags_column not in columns:
            raise DataError(f"{path}: no tags column {tags_column!r} beside {tokens_column!r}; columns found: "
                            f"{preview(columns)}; name it with --tags-column.")
        eval_set = load_eval_set(path, text_column=tokens_column, label_column=None, id_column=data_opts.id_column,
                                 required=(tags_column,), strings_only=False, table=table, sha256=sha256)
        return _word_sentences(eval_set, tokens_column, tags_column, labels)
    text_column = data_opts.text_column
    if text_column in columns and spans_column in columns:
        eval_set = load_eval_set(path, text_column=text_column, label_column=None, id_column=data_opts.id_column,
                                 required=(spans_column,), max_chars=data_opts.max_chars, table=table,
                                 sha256=sha256)
        return _text_sentences(eval_set, spans_column, types)
    raise DataError(f"{path}: neither a {tokens_column!r} + {tags_column!r} pair of columns nor a {text_column!r} + "
                    f"{spans_column!r} pair; columns found: {preview(columns)}; name them with --tokens-column and "
                    "--tags-column, or --text-column and --spans-column.")


def _as_list(value):
    if hasattr(value, "tolist") and not isinstance(value, str):
        value = value.tolist()
    return value


def _word_sentences(eval_set: EvalSet, tokens_column: str, tags_column: str, labels: Sequence[str]) -> Sentences:
    frame = eval_set.frame
    source, lines = str(eval_set.path), frame["_line"].to_numpy()
    known = {name: name for name in labels}
    words, gold = [], []
    for i, (tokens, tags) in enumerate(zip(frame["text"].to_numpy(dtype=object), frame[tags_column])):
        line = int(lines[i])
        tokens, tags = _as_list(tokens), _as_list(tags)
        if not isinstance(tokens, list) or not tokens or not all(isinstance(t, str) for t in tokens):
            raise DataError(f"{where(source, line, tokens_column)}: {preview([tokens], 1)} is not a non-empty list "
                            "of words (strings); give each sentence as a list of its words.")
        if not isinstance(tags, list):
            raise DataError(f"{where(source, line, tags_column)}: {preview([tags], 1)} is not a list of tags; give "
                            "one tag (name or id) per word.")
        if len(tags) != len(tokens):
            raise DataError(f"{where(source, line, tags_column)}: {len(tags)} tags for {len(tokens)} tokens; give "
                            "exactly one tag per token.")
        names = []
        for k, tag in enumerate(tags):
            name = _tag_name(tag, labels, known)
            if name is None:
                raise DataError(f"{where(source, line, tags_column)}: tag {tag!r} (token {k + 1}, "
                                f"{tokens[k]!r}) is not one the model knows ({preview(labels, 8)}); map it to the "
                                "model's tags or drop the row.")
            names.append(name)
        words.append(tokens)
        gold.append(names)
    return Sentences(eval_set=eval_set, source=source, lines=lines, words=words, gold=gold, column=tags_column)


def _tag_name(tag, labels: Sequence[str], known: dict) -> str | None:
    """A gold tag as the model's tag name: a name it has, or an id in range (an int, or digits)."""
    if isinstance(tag, (bool, np.bool_)):
        return None
    if isinstance(tag, (int, np.integer)):
        return labels[int(tag)] if 0 <= int(tag) < len(labels) else None
    if isinstance(tag, str):
        if tag in known:
            return tag
        if tag.isdigit() and int(tag) < len(labels):
            return labels[int(tag)]
    return None


def _text_sentences(eval_set: EvalSet, spans_column: str, types: Sequence[str]) -> Sentences:
    frame = eval_set.frame
    source, lines = str(eval_set.path), frame["_line"].to_numpy()
    texts = [t if isinstance(t, str) else "" for t in frame["text"].tolist()]
    all_spans = []
    for i, cell in enumerate(frame[spans_column].to_numpy(dtype=object)):
        all_spans.append(_check_spans(cell, texts[i], types, where(source, int(lines[i]), spans_column)))
    return Sentences(eval_set=eval_set, source=source, lines=lines, texts=texts, char_spans=all_spans,
                     column=spans_column)


def _check_spans(cell, text: str, types: Sequence[str], at: str) -> list[tuple[int, int, str]]:
    import json

    if isinstance(cell, str):
        try:
            cell = json.loads(cell)
        except json.JSONDecodeError:
            raise DataError(f"{at}: not a JSON list of {{start, end, label}} spans; write the spans as a list.") \
                from None
    cell = _as_list(cell)
    if cell is None or (isinstance(cell, float) and np.isnan(cell)):
        raise DataError(f"{at}: no spans (an empty cell); write [] for a text without entities.")
    if not isinstance(cell, list):
        raise DataError(f"{at}: {preview([cell], 1)} is not a list of {{start, end, label}} spans.")
    spans = []
    for k, span in enumerate(cell):
        if not isinstance(span, dict) or not {"start", "end", "label"} <= set(span):
            raise DataError(f"{at}: span {k + 1} {preview([span], 1)} is not an object with start, end and label.")
        start, end, label = span["start"], span["end"], span["label"]
        if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in (start, end)):
            raise DataError(f"{at}: span {k + 1} has start {start!r} and end {end!r}; character offsets are integers.")
        if not 0 <= start < end <= len(text):
            raise DataError(f"{at}: span {k + 1} [{start}, {end}) is out of range for a {len(text)}-character "
                            "text; offsets are 0-based, end exclusive, start < end <= the text's length.")
        if label not in types:
            raise DataError(f"{at}: span {k + 1} label {label!r} is not an entity type the model knows "
                            f"({preview(types, 8)}); map it or drop the span.")
        spans.append((int(start), int(end), str(label)))
    spans.sort()
    for a, b in zip(spans, spans[1:]):
        if b[0] < a[1]:
            raise DataError(f"{at}: spans [{a[0]}, {a[1]}) and [{b[0]}, {b[1]}) overlap; nested entities are not "
                            "supported: keep one.")
    return spans


def gold_from_spans(offsets: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int, str]], scheme: str,
                    at: str) -> tuple[list[str], int]:
    """Word tags for character spans over words at `offsets`, and how many spans had an edge inside a word."""
    word_spans, snapped = [], 0
    for k, (start, end, label) in enumerate(spans):
        covered = [w for w, (s, e) in enumerate(offsets) if s < end and e > start and s >= 0]
        if not covered:
            raise DataError(f"{at}: span {k + 1} [{start}, {end}) covers no word of the text (only spaces?); fix "
                            "its offsets.")
        first, last = covered[0], covered[-1]
        snapped += int(offsets[first][0] != start or offsets[last][1] != end)
        if word_spans and first < word_spans[-1][1]:
            raise DataError(f"{at}: span {k + 1} [{start}, {end}) shares a word with the span before it; a word "
                            "holds one entity.")
        word_spans.append((first, last + 1, label))
    return encode_spans(len(offsets), word_spans, scheme), snapped
