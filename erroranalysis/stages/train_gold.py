"""A training file's rows as the checks compare them with `--train` (both engines: `check_parts.load_train` reads the
whole file, `check_ray_train` a block of it on a worker): example_id, text, and the gold written as the run's
predictions.parquet writes its `label` column, read by the run's task as the eval set was read:

- classification: the class name (integer ids into the run's labels are mapped when no value is a name,
  `train_blocks.ids_are_labels`, decided over the whole file);
- multilabel: a set of names or ids (a list, a JSON list, a string cut at the run's `--label-sep`, or with
  `--label-per-column` one 0/1 column per label), written as the run writes it: names in the model's order joined
  by " | ", "(none)" for the empty set;
- regression: a finite number, written as its bin among the eval gold's quantile edges (the manifest's `edges`), as
  the run's label column, whose bins the duplicate conflicts also compare;
- token classification: sentences in the eval set's columns (tokens + tags, or text + character spans); the text is
  the words joined by spaces (a raw text as it is), the label the sentence's entity types joined by "+" ("O": none).

Leakage compares these labels (`train_label_differs`) and the shift report counts them (its class balance), as for a
classification run. A bad cell is the reader's one-line error naming the training file, line and column.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

NEEDS_IDS = "classification"  # the one task whose training labels may be integer ids into the run's labels


@dataclass(frozen=True)
class TrainGold:
    """How the run's task reads a training file's gold (picklable: Ray workers read their blocks with it)."""

    task: str
    labels: tuple[str, ...]
    sep: str | None = None  # multilabel: --label-sep
    per_column: bool = False  # multilabel: --label-per-column
    edges: tuple[float, ...] | None = None  # regression: the eval gold's quantile bins
    tokens: tuple | None = None  # token classification: tokens, tags and spans columns, scheme, span mode, types,
    # the model's tags (none when the predictions were made elsewhere: then every tag of the scheme)

    @classmethod
    def of(cls, run) -> TrainGold:
        task_params = run.manifest.get("task_params") or {}
        edges = task_params.get("edges")
        tokens = None
        if run.task == "token-classification":
            stages = run.manifest.get("stages", {})
            record = (stages.get("load_predictions") or stages.get("infer") or {}).get("params", {})
            info = run.manifest.get("tokens") or {}
            model_tags = (run.manifest.get("model") or {}).get("tags")
            tokens = (record.get("tokens_column", "tokens"), record.get("tags_column", "tags"),
                      record.get("spans_column", "spans"), info.get("scheme", "IOB2"), info.get("span_mode", "default"),
                      tuple(info.get("types") or ()), tuple(model_tags or ()))
        return cls(run.task, tuple(run.labels), sep=task_params.get("label_sep"),
                   per_column=bool(task_params.get("label_per_column")),
                   edges=tuple(edges) if edges else None, tokens=tokens)

    @property
    def id_labels(self) -> list[str]:
        """The labels integer ids may name (`train_blocks.ids_are_labels`): none but a classification run's."""
        return list(self.labels) if self.task == NEEDS_IDS else []

    def read(self, path, table: tuple, opts, sha256: str | None = None):
        """The rows of `table` (a frame with `_line` and its format: a whole file, or a block of one) as an `EvalSet`
        whose frame holds example_id, text and label (the run's label text), checked as the eval set is."""
        from erroranalysis.sources.table import load_eval_set

        if self.task == "token-classification":
            return self._sentences(path, table, opts, sha256)
        if self.task not in ("multilabel", "regression"):
            return load_eval_set(path, text_column=opts.text_column, label_column=opts.label_column,
                                 id_column=opts.id_column, max_chars=opts.max_chars, table=table, sha256=sha256)
        gold = self.labels if self.per_column else (opts.label_column,)
        eval_set = load_eval_set(path, text_column=opts.text_column, label_column=None, id_column=opts.id_column,
                                 max_chars=opts.max_chars, required=gold, table=table, sha256=sha256)
        frame = eval_set.frame
        lines = frame["_line"].to_numpy()
        eval_set.frame = frame.assign(label=self._labels(frame, str(eval_set.path), lines, opts.label_column))
        return eval_set

    def _labels(self, frame, source: str, lines, column: str) -> np.ndarray:
        from erroranalysis.infer.predictions import bin_names
        from erroranalysis.sources import gold as golds

        if self.task == "regression":
            target = golds.regression_gold(frame[column].to_numpy(dtype=object), source=source, lines=lines,
                                           column=column)
            names = bin_names(target, self.edges) if self.edges else [str(v) for v in target]
            return np.asarray(names, dtype=object)
        labels = list(self.labels)
        if self.per_column:
            multi_hot = golds.multilabel_columns(frame, labels, source=source, lines=lines)
        else:
            multi_hot = golds.multilabel_gold(frame[column].to_numpy(dtype=object), labels, sep=self.sep,
                                              source=source, lines=lines, column=column)
        names = np.asarray(labels, dtype=object)
        return np.asarray([golds.label_set(row, names) for row in multi_hot], dtype=object)

    def _sentences(self, path, table: tuple, opts, sha256):
        from erroranalysis.metrics import tokens as tm
        from erroranalysis.sources.tokens import sentences_of

        tokens, tags, spans, scheme, span_mode, types, model_tags = self.tokens
        tag_names = list(model_tags) or _tags(types, scheme)
        sentences = sentences_of(path, table, opts, tokens, tags, spans, tag_names, list(types), sha256=sha256)
        if sentences.raw:
            texts = list(sentences.texts)
            found = [{t for _, _, t in s} for s in sentences.char_spans]
        else:
            texts = [" ".join(words) for words in sentences.words]
            found = [{t for _, _, t in tm.spans_of(g, scheme, span_mode)} for g in sentences.gold]
        eval_set = sentences.eval_set
        eval_set.frame = eval_set.frame.assign(
            text=pd.array(texts, dtype=object), label=["+".join(sorted(t)) or tm.OUTSIDE for t in found])
        return eval_set


def _tags(types, scheme: str) -> list[str]:
    """Every tag of `scheme` over the entity `types`, and O: the tags a training sentence may use."""
    from erroranalysis.metrics import tokens as tm

    if scheme == "plain":
        return [*types, tm.OUTSIDE]
    return [f"{p}-{t}" for t in types for p in tm.PREFIXES[scheme]] + [tm.OUTSIDE]
