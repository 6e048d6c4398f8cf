"""Distribution shift between a training set and the eval set, with plain-language findings.

`shift_report` compares:

- class balance: each label's share in train and eval, a chi-square test of independence on the 2 x K table
  of counts, Cramer's V as the effect size, labels present on one side only;
- length and tokens: words per text (whitespace tokens), a two-sample Kolmogorov-Smirnov test, vocabulary
  sizes and the out-of-vocabulary rate (eval word tokens never seen in train);
- the words that moved most: log-odds ratio with an informative Dirichlet prior (Monroe, Colaresi & Quinn 2008,
  "Fightin' Words"), the pooled counts as the prior, ranked by z-score;
- a domain classifier: logistic regression that tells train from eval on embeddings, cross-validated; its
  ROC AUC is ~0.5 when the sets look alike and near 1 when they are easy to tell apart. Its out-of-fold scores
  also name the eval examples least like training.

Findings reuse `erroranalysis.core.findings.Finding` (check, severity, steps=(), message, advice).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Callable, Sequence

import numpy as np

from erroranalysis.core import counted
from erroranalysis.core.errors import DataError
from erroranalysis.core.findings import SEVERITIES, Finding
from erroranalysis.core.sampling import seeded_rows
from erroranalysis.core.validation import check_param

_WORD = re.compile(r"[^\W\d_][\w'-]*", re.UNICODE)

# Thresholds behind the findings (named so reports and docs can quote them).
CHI2_ALPHA = 0.01
CRAMERS_V_NOTABLE = 0.1
LENGTH_RATIO_NOTABLE = 1.25
OOV_NOTABLE = 0.05
WORD_Z_NOTABLE = 4.0
AUC_NOTABLE = 0.7
AUC_STRONG = 0.9
MAX_PER_SIDE = 5000  # rows a side the domain classifier sees (a seeded sample above)


def words(text) -> list[str]:
    """Lower-cased word tokens: letters first, then letters, digits, apostrophes or hyphens."""
    return _WORD.findall(str(text).lower())


def shift_report(train_texts: Sequence[str], eval_texts: Sequence[str], *, train_labels=None, eval_labels=None,
                 train_embeddings=None, eval_embeddings=None, embed: Callable | None = None,
                 domain_classifier: bool = True, n_words: int = 15, min_count: int = 5,
                 max_per_side: int = MAX_PER_SIDE, folds: int = 5, seed: int = 0) -> dict:
    """A JSON-serializable report: class_balance, lengths, vocabulary, words, domain, findings.

    Embeddings for the domain classifier come from `train_embeddings`/`eval_embeddings` (one row per text),
    else from `embed(texts)`, else the packaged MiniLM; `domain_classifier=False` skips it.
    """
    check_param("n_words", n_words, isinstance(n_words, int) and n_words >= 1, "an integer >= 1")
    check_param("min_count", min_count, isinstance(min_count, int) and min_count >= 1, "an integer >= 1")
    check_param("folds", folds, isinstance(folds, int) and folds >= 2, "an integer >= 2")
    check_param("max_per_side", max_per_side, isinstance(max_per_side, int) and max_per_side >= 10,
                "an integer >= 10")
    train_texts, eval_texts = [str(t) for t in train_texts], [str(t) for t in eval_texts]
    check_sizes(len(train_texts), len(eval_texts))
    train, evals = side_counts(train_texts, train_labels), side_counts(eval_texts, eval_labels)
    train_vocab = set(train["words"])
    oov = mostly_oov([words(t) for t in eval_texts], train_vocab)
    report = counted_report(train, evals, oov, labels=train_labels is not None and eval_labels is not None,
                            n_words=n_words, min_count=min_count)
    if domain_classifier:
        report["domain"] = domain_auc(train_texts, eval_texts, train_embeddings=train_embeddings,
                                      eval_embeddings=eval_embeddings, embed=embed, max_per_side=max_per_side,
                                      folds=folds, seed=seed)
    report["findings"] = [f.to_dict() for f in findings(report)]
    return report


def check_sizes(n_train: int, n_eval: int) -> None:
    if not n_train or not n_eval:
        raise DataError(f"shift: {n_train} train and {n_eval} eval texts; both need examples.")


# -- counts that merge: what the report needs of each side, summed over any split of its rows ---------------------


def side_counts(texts: Sequence[str], labels=None) -> dict:
    """One side's (or one block's) counts: texts, labels, words per text and word tokens. Counts of two splits of
    the rows add up (`add_counts`) to those of the whole, so the report is the same from blocks."""
    tokens = [words(t) for t in texts]
    return {"n": len(tokens), "labels": Counter(str(x) for x in labels) if labels is not None else Counter(),
            "lengths": Counter(len(x) for x in tokens), "words": Counter(w for toks in tokens for w in toks)}


def add_counts(a: dict, b: dict) -> dict:
    return {"n": a["n"] + b["n"], **{k: a[k] + b[k] for k in ("labels", "lengths", "words")}}


def mostly_oov(eval_tokens: list[list[str]], train_vocab) -> int:
    """Eval texts more than half of whose word tokens never occur in training (summed over blocks)."""
    return int(sum(1 for toks in eval_tokens if toks and sum(w not in train_vocab for w in toks) / len(toks) > 0.5))


def counted_report(train: dict, evals: dict, n_mostly_oov: int, *, labels: bool, n_words: int = 15,
                   min_count: int = 5) -> dict:
    """The report's counted parts (everything but the domain classifier and the findings) from both sides'
    `side_counts`."""
    report: dict = {"n_train": train["n"], "n_eval": evals["n"]}
    if labels:
        report["class_balance"] = balance_of_counts(train["labels"], evals["labels"])
    report["lengths"] = lengths_of_counts(train["lengths"], evals["lengths"])
    report["vocabulary"] = vocabulary_of_counts(train["words"], evals["words"], n_mostly_oov)
    report["words"] = moved_words_of_counts(train["words"], evals["words"], n=n_words, min_count=min_count)
    return report


# -- parts ------------------------------------------------------------------------------------------------------


def class_balance(train_labels, eval_labels) -> dict:
    """Counts and shares per label, chi-square test of independence (set x label), Cramer's V."""
    return balance_of_counts(Counter(str(x) for x in train_labels), Counter(str(x) for x in eval_labels))


def balance_of_counts(train: Counter, evals: Counter) -> dict:
    """`class_balance` from each side's label counts."""
    from scipy.stats import chi2_contingency

    labels = sorted(set(train) | set(evals))
    table = np.array([[train[c] for c in labels], [evals[c] for c in labels]], dtype=np.float64)
    n_train, n_eval = table.sum(1)
    rows = [{"label": c, "train": int(train[c]), "eval": int(evals[c]),
             "train_share": train[c] / n_train, "eval_share": evals[c] / n_eval,
             "difference": evals[c] / n_eval - train[c] / n_train} for c in labels]
    out = {"labels": rows, "only_in_train": [c for c in labels if not evals[c]],
           "only_in_eval": [c for c in labels if not train[c]], "chi2": None, "p_value": None, "dof": None,
           "cramers_v": None}
    if len(labels) >= 2:
        chi2, p, dof, _ = chi2_contingency(table, correction=False)
        out.update(chi2=float(chi2), p_value=float(p), dof=int(dof),
                   cramers_v=float(math.sqrt(chi2 / table.sum())))  # min(rows, cols) - 1 = 1 for two sets
    return out


def length_stats(train_tokens: list[list[str]], eval_tokens: list[list[str]]) -> dict:
    """Words per text on each side (mean, quantiles), and a two-sample KS test."""
    return lengths_of_counts(Counter(len(x) for x in train_tokens), Counter(len(x) for x in eval_tokens))


KS_EXACT_MAX = 10_000  # scipy's ks_2samp computes the exact p-value up to this many values a side ("auto")


def lengths_of_counts(train: Counter, evals: Counter) -> dict:
    """`length_stats` from each side's count of texts per length: the quantiles np.quantile gives on the values,
    the KS statistic from the two step CDFs, its p-value as scipy's ks_2samp gives it (exact up to KS_EXACT_MAX
    values a side, from the values themselves; above, Smirnov's asymptotic distribution), so no side's values are
    ever held."""
    from scipy.stats import distributions, ks_2samp

    t, e = _histogram(train), _histogram(evals)
    n1, n2 = int(t[1].sum()), int(e[1].sum())
    if max(n1, n2) <= KS_EXACT_MAX:
        ks = ks_2samp(np.repeat(*t).astype(np.float64), np.repeat(*e).astype(np.float64))
        statistic, p_value = float(ks.statistic), float(ks.pvalue)
    else:
        grid = np.union1d(t[0], e[0])
        cdf1 = np.cumsum(t[1])[np.searchsorted(t[0], grid, side="right") - 1] * (grid >= t[0][0]) / n1
        cdf2 = np.cumsum(e[1])[np.searchsorted(e[0], grid, side="right") - 1] * (grid >= e[0][0]) / n2
        statistic = float(np.abs(cdf1 - cdf2).max())
        m, n = sorted([float(n1), float(n2)], reverse=True)
        p_value = float(np.clip(distributions.kstwo.sf(statistic, np.round(m * n / (m + n))), 0, 1))
    t_mean, e_mean = _mean(*t), _mean(*e)
    return {"unit": "words", "train": _describe_counts(*t), "eval": _describe_counts(*e),
            "mean_ratio": float(e_mean / t_mean) if t_mean > 0 else None,
            "ks_statistic": statistic, "ks_p_value": p_value}


def _histogram(counts: Counter) -> tuple[np.ndarray, np.ndarray]:
    values = np.asarray(sorted(counts), dtype=np.float64)
    return values, np.asarray([counts[v] for v in sorted(counts)], dtype=np.int64)


def _mean(values: np.ndarray, counts: np.ndarray) -> float:
    return float((values * counts).sum() / counts.sum())


def _describe_counts(values: np.ndarray, counts: np.ndarray) -> dict:
    q = counted.quantiles(values, counts, [0.1, 0.5, 0.9, 0.99])
    return {"mean": _mean(values, counts), "p10": float(q[0]), "median": float(q[1]), "p90": float(q[2]),
            "p99": float(q[3]), "max": float(values.max()), "empty": int(counts[values == 0].sum())}


def vocabulary_stats(train_tokens: list[list[str]], eval_tokens: list[list[str]]) -> dict:
    """Vocabulary sizes, type/token ratios and how much of eval's text is out of train's vocabulary."""
    train = Counter(w for toks in train_tokens for w in toks)
    return vocabulary_of_counts(train, Counter(w for toks in eval_tokens for w in toks),
                                mostly_oov(eval_tokens, set(train)))


def vocabulary_of_counts(train: Counter, eval_counts: Counter, n_mostly_oov: int) -> dict:
    """`vocabulary_stats` from each side's word counts and the eval texts mostly out of vocabulary (`mostly_oov`)."""
    n_eval_tokens = sum(eval_counts.values())
    oov_tokens = sum(c for w, c in eval_counts.items() if w not in train)
    n_train_tokens = sum(train.values())
    return {"train_vocabulary": len(train), "eval_vocabulary": len(eval_counts),
            "train_tokens": n_train_tokens, "eval_tokens": n_eval_tokens,
            "train_type_token_ratio": len(train) / n_train_tokens if n_train_tokens else None,
            "eval_type_token_ratio": len(eval_counts) / n_eval_tokens if n_eval_tokens else None,
            "oov_token_rate": oov_tokens / n_eval_tokens if n_eval_tokens else 0.0,
            "oov_type_rate": sum(w not in train for w in eval_counts) / len(eval_counts) if eval_counts else 0.0,
            "eval_texts_mostly_oov": int(n_mostly_oov)}


def moved_words(train_tokens: list[list[str]], eval_tokens: list[list[str]], *, n: int = 15,
                min_count: int = 5, prior_weight: float = 1.0) -> dict:
    """Words more frequent in eval than train (and the reverse), by log-odds ratio z-score with an informative
    Dirichlet prior (the pooled counts times `prior_weight`). Words seen fewer than `min_count` times are left out."""
    return moved_words_of_counts(Counter(w for toks in train_tokens for w in toks),
                                 Counter(w for toks in eval_tokens for w in toks), n=n, min_count=min_count,
                                 prior_weight=prior_weight)


def moved_words_of_counts(train: Counter, evals: Counter, *, n: int = 15, min_count: int = 5,
                          prior_weight: float = 1.0) -> dict:
    """`moved_words` from each side's word counts."""
    vocab = sorted(w for w in set(train) | set(evals) if train[w] + evals[w] >= min_count)
    if not vocab:
        return {"method": "log-odds ratio, informative Dirichlet prior", "more_in_eval": [], "more_in_train": []}
    y_e = np.array([evals[w] for w in vocab], dtype=np.float64)
    y_t = np.array([train[w] for w in vocab], dtype=np.float64)
    alpha = prior_weight * (y_e + y_t)
    a0 = alpha.sum()
    n_e, n_t = sum(evals.values()), sum(train.values())
    delta = (np.log((y_e + alpha) / (n_e + a0 - y_e - alpha))
             - np.log((y_t + alpha) / (n_t + a0 - y_t - alpha)))
    z = delta / np.sqrt(1 / (y_e + alpha) + 1 / (y_t + alpha))

    def rows(order):
        return [{"word": vocab[i], "z": float(z[i]), "eval_count": int(y_e[i]), "train_count": int(y_t[i]),
                 "eval_per_1k": 1000 * y_e[i] / max(n_e, 1), "train_per_1k": 1000 * y_t[i] / max(n_t, 1)}
                for i in order]

    order = np.argsort(-z, kind="stable")
    return {"method": "log-odds ratio, informative Dirichlet prior",
            "more_in_eval": rows([i for i in order[:n] if z[i] > 0]),
            "more_in_train": rows([i for i in order[::-1][:n] if z[i] < 0])}


def domain_auc(train_texts: Sequence[str], eval_texts: Sequence[str], *, train_embeddings=None,
               eval_embeddings=None, embed: Callable | None = None, max_per_side: int = MAX_PER_SIDE, folds: int = 5,
               seed: int = 0, n_examples: int = 10) -> dict:
    """Cross-validated ROC AUC of a logistic regression telling eval from train on embeddings, and the eval
    examples it finds least like training (highest out-of-fold score)."""
    t_rows, e_rows = domain_rows(len(train_texts), len(eval_texts), max_per_side, seed)
    if min(folds, len(t_rows), len(e_rows)) < 2:
        return {"auc": None, "folds": min(folds, len(t_rows), len(e_rows)),
                "note": "too few examples on one side for cross-validation"}
    t_vec = _embeddings(train_texts, t_rows, train_embeddings, embed, "train")
    e_vec = _embeddings(eval_texts, e_rows, eval_embeddings, embed, "eval")
    return domain_fit(t_vec, e_vec, e_rows, folds=folds, seed=seed, n_examples=n_examples)


def domain_rows(n_train: int, n_eval: int, max_per_side: int = MAX_PER_SIDE, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The rows of each side the domain classifier sees: every row up to `max_per_side`, else a seeded sample
    (train's drawn first, from one generator)."""
    rng = np.random.default_rng(seed)
    return seeded_rows(n_train, max_per_side, rng), seeded_rows(n_eval, max_per_side, rng)


def domain_fit(t_vec, e_vec, e_rows: np.ndarray, *, folds: int = 5, seed: int = 0, n_examples: int = 10) -> dict:
    """`domain_auc` on the vectors of the `domain_rows` of each side (`e_rows`: the eval rows, in order)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score
    from sklearn.model_selection import StratifiedKFold, cross_val_predict

    folds = min(folds, len(t_vec), len(e_rows))
    if folds < 2:
        return {"auc": None, "folds": folds, "note": "too few examples on one side for cross-validation"}
    for side, vectors in (("train", t_vec), ("eval", e_vec)):
        if not np.isfinite(vectors).all():
            raise DataError(f"{side} embeddings: contain NaN or infinite values; fix the embedder that produced "
                            "them.")
    if t_vec.shape[1] != e_vec.shape[1]:
        raise DataError(f"embeddings: train vectors have {t_vec.shape[1]} dimensions, eval {e_vec.shape[1]}; "
                        "embed both with the same model.")
    x = np.vstack([t_vec, e_vec]).astype(np.float64)
    y = np.r_[np.zeros(len(t_vec)), np.ones(len(e_vec))]
    model = LogisticRegression(C=1.0, max_iter=1000, class_weight="balanced")
    splitter = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    scores = cross_val_predict(model, x, y, cv=splitter, method="predict_proba")[:, 1]
    auc = float(roc_auc_score(y, scores))
    eval_scores = scores[len(t_vec):]
    top = np.argsort(-eval_scores, kind="stable")[:n_examples]
    return {"auc": auc, "folds": folds, "n_train": int(len(t_vec)), "n_eval": int(len(e_rows)),
            "classifier": "logistic regression (C=1, balanced)",
            "least_like_train": [{"eval_index": int(e_rows[i]), "score": float(eval_scores[i])} for i in top]}




def _embeddings(texts, rows, given, embed, side) -> np.ndarray:
    if given is not None:
        given = np.asarray(given)
        if given.ndim != 2 or len(given) != len(texts):
            raise DataError(f"{side} embeddings: shape {tuple(given.shape)} does not give one vector per text "
                            f"({len(texts)} texts).")
        vectors = given[rows]
    else:
        if embed is None:
            from erroranalysis.datachecks.duplicates import default_embed

            embed = default_embed()
        vectors = np.asarray(embed([texts[i] for i in rows]))
    return vectors  # finite: checked by domain_fit


# -- findings ---------------------------------------------------------------------------------------------------


def findings(report: dict) -> list[Finding]:
    """Plain-language findings from a shift report, most severe first."""
    out: list[Finding] = []
    balance = report.get("class_balance")
    if balance:
        if balance["only_in_eval"]:
            out.append(Finding("label_unseen_in_train", "error", (),
                               f"labels {_names(balance['only_in_eval'])} occur in eval but never in train",
                               "The model cannot learn a class it never saw: add training examples for them, or "
                               "check that the two files spell labels the same way."))
        if balance["only_in_train"]:
            out.append(Finding("label_missing_in_eval", "info", (),
                               f"labels {_names(balance['only_in_train'])} occur in train but never in eval",
                               "Their per-class scores cannot be measured on this eval set."))
        p, v = balance["p_value"], balance["cramers_v"]
        if p is not None and p < CHI2_ALPHA and v >= CRAMERS_V_NOTABLE:
            moved = max(balance["labels"], key=lambda r: abs(r["difference"]))
            out.append(Finding(
                "class_balance_shift", "warning", (),
                f"class balance differs between train and eval (chi-square p={p:.2g}, Cramer's V={v:.2f}); "
                f"largest change: {moved['label']!r} is {moved['train_share']:.0%} of train and "
                f"{moved['eval_share']:.0%} of eval",
                "Per-class metrics are comparable, accuracy is not: read per-class recall, and consider "
                "re-weighting classes or recalibrating the decision thresholds for the eval distribution."))
    lengths = report["lengths"]
    ratio = lengths["mean_ratio"]
    if ratio is not None and (ratio >= LENGTH_RATIO_NOTABLE or ratio <= 1 / LENGTH_RATIO_NOTABLE) \
            and lengths["ks_p_value"] < CHI2_ALPHA:
        longer = "longer" if ratio > 1 else "shorter"
        out.append(Finding(
            "length_shift", "warning", (),
            f"eval texts are {longer} than training texts: {lengths['eval']['mean']:.0f} words on average vs "
            f"{lengths['train']['mean']:.0f} (KS p={lengths['ks_p_value']:.2g})",
            "Check the error rate by length (metrics by_metadata text_length) and, for longer texts, how many were "
            "truncated at --max-length."))
    vocab = report["vocabulary"]
    if vocab["oov_token_rate"] >= OOV_NOTABLE:
        out.append(Finding(
            "vocabulary_shift", "warning", (),
            f"{vocab['oov_token_rate']:.0%} of eval's words never occur in the training set "
            f"({vocab['eval_texts_mostly_oov']} eval texts are mostly such words)",
            "Eval covers topics or wording training did not: look at the words that moved most, and add "
            "training data from eval's domain."))
    moved = [w for w in report["words"]["more_in_eval"] if w["z"] >= WORD_Z_NOTABLE][:8]
    if moved:
        out.append(Finding(
            "words_moved", "info", (),
            "words much more frequent in eval than in train: " + ", ".join(repr(w["word"]) for w in moved),
            "If these words mark a topic or source the model rarely saw, expect errors there: check the slices "
            "report for them."))
    domain = report.get("domain")
    if domain and domain.get("auc") is not None:
        auc = domain["auc"]
        if auc >= AUC_STRONG:
            out.append(Finding(
                "domain_shift", "error", (),
                f"a classifier tells eval from training texts almost perfectly (AUC {auc:.2f}): the two sets come "
                "from clearly different distributions",
                "Eval measures generalization to a new domain, not held-out performance: read the eval examples "
                "least like training, and add training data like them if that domain matters."))
        elif auc >= AUC_NOTABLE:
            out.append(Finding(
                "domain_shift", "warning", (),
                f"a classifier tells eval from training texts fairly well (AUC {auc:.2f}): the sets differ",
                "Read the eval examples least like training; compare their error rate with the rest."))
    return sorted(out, key=lambda f: SEVERITIES.index(f.severity))


def _names(values, limit: int = 5) -> str:
    values = list(values)
    shown = ", ".join(repr(v) for v in values[:limit])
    return shown + (f" and {len(values) - limit} more" if len(values) > limit else "")
