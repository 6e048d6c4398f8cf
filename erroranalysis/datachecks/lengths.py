"""Length distributions of training and eval texts (words, and tokens when a tokenizer is at hand): the
checklist's "token distribution, sequence length" between what the model trained on and what it is tested on."""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from erroranalysis.datachecks.contamination import words

QUANTILES = (0.05, 0.5, 0.95, 0.99)
LONGER_NOTABLE = 0.05  # share of eval texts longer than the training p99 worth a finding
KS_NOTABLE = 0.2


def distribution(values: np.ndarray) -> dict:
    values = np.asarray(values, dtype=np.float64)
    if not values.size:
        return {"n": 0}
    q = np.quantile(values, QUANTILES)
    return {"n": int(values.size), "mean": float(values.mean()), "p5": float(q[0]), "p50": float(q[1]),
            "p95": float(q[2]), "p99": float(q[3]), "max": float(values.max())}


def compare(train: np.ndarray, eval_: np.ndarray) -> dict:
    """Both distributions, the two-sample Kolmogorov-Smirnov statistic and the share of eval values above the
    training 99th percentile."""
    from scipy.stats import ks_2samp

    out = {"train": distribution(train), "eval": distribution(eval_), "ks": None, "p_value": None,
           "eval_above_train_p99": None}
    if len(train) and len(eval_):
        test = ks_2samp(np.asarray(train, float), np.asarray(eval_, float))
        out.update(ks=float(test.statistic), p_value=float(test.pvalue),
                   eval_above_train_p99=float((np.asarray(eval_) > out["train"]["p99"]).mean()))
    return out


def length_report(train_texts: Sequence[str], eval_texts: Sequence[str],
                  count_tokens: Callable[[Sequence[str]], np.ndarray] | None = None, tokenizer: str | None = None
                  ) -> dict:
    """Words per text (whitespace tokens of the normalized text) and, with `count_tokens`, tokens per text, of
    the training and eval texts compared."""
    return counts_report(word_counts(train_texts), word_counts(eval_texts),
                         None if count_tokens is None else np.asarray(count_tokens(train_texts)),
                         None if count_tokens is None else np.asarray(count_tokens(eval_texts)), tokenizer)


def word_counts(texts: Sequence[str]) -> np.ndarray:
    return np.array([len(words(t)) for t in texts], dtype=np.int64)


def counts_report(train_words: np.ndarray, eval_words: np.ndarray, train_tokens: np.ndarray | None = None,
                  eval_tokens: np.ndarray | None = None, tokenizer: str | None = None) -> dict:
    """`length_report` from the lengths themselves (in any order: only their distribution counts)."""
    return {"words": compare(train_words, eval_words),
            "tokens": None if train_tokens is None else compare(train_tokens, eval_tokens), "tokenizer": tokenizer}


def histogram(values: np.ndarray) -> dict[int, int]:
    """Integer lengths as {length: count}: the lengths of any split of the rows, added, give the whole's."""
    found, counts = np.unique(np.asarray(values, dtype=np.int64), return_counts=True)
    return dict(zip(found.tolist(), counts.tolist()))


def from_histogram(counts: dict[int, int]) -> np.ndarray:
    """The lengths a `histogram` counts, sorted."""
    keys = sorted(counts)
    return np.repeat(np.asarray(keys, dtype=np.int64), [counts[k] for k in keys])
