"""Synthetic run directories for the app, labels and export tests and for benchmarks/ui.py.

`make_run(path, n=400, n_failures=80)` writes every artifact the app reads, in the formats of
docs/run-directory.md: manifest, predictions.parquet, probs.npy, metrics.json, clusters.parquet and
assignments.parquet, with the stages marked done. Deterministic given the seed; no model, no network.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

LABELS = ["business", "entertainment", "politics", "sport", "tech"]

_VOCAB = {
    "business": "shares market profit bank economy growth investors deal firm sales quarter prices".split(),
    "entertainment": "film music award star band album actor festival show singer box office".split(),
    "politics": "minister election party government vote labour tory campaign policy parliament".split(),
    "sport": "match cup team coach season injury win league players final goal champion".split(),
    "tech": "software mobile phone internet users broadband game online digital computer virus".split(),
}
_FILLER = "the a of to and in said that for on was is with by it at from has have will year new".split()


def _texts(rng: np.random.Generator, label_idx, other_idx, n_words) -> list[str]:
    """Texts of n_words words: filler, words of the gold class and, for failures, words of the predicted class."""
    total = int(n_words.sum())
    owner = np.repeat(np.arange(len(n_words)), n_words)
    r = rng.random(total)
    vocab = [np.array(_VOCAB[c], dtype=object) for c in LABELS]
    filler = np.array(_FILLER, dtype=object)
    words = filler[rng.integers(0, len(filler), size=total)]
    own = (r >= 0.25) & (r < 0.45)
    other = (r < 0.25) & (other_idx[owner] >= 0)
    own |= (r < 0.25) & (other_idx[owner] < 0) & (r < 0.1)
    for c in range(len(LABELS)):
        m = own & (label_idx[owner] == c)
        words[m] = vocab[c][rng.integers(0, len(vocab[c]), size=int(m.sum()))]
        m = other & (other_idx[owner] == c)
        words[m] = vocab[c][rng.integers(0, len(vocab[c]), size=int(m.sum()))]
    out = []
    for chunk in np.split(words, np.cumsum(n_words)[:-1]):
        text = " ".join(chunk)
        out.append(text[0].upper() + text[1:] + ".")
    return out


def make_run(path: str | Path, *, n: int = 400, n_failures: int = 80, n_clusters: int = 6, seed: int = 0,
             with_clusters: bool = True, with_probs: bool = True, text_words: tuple[int, int] = (12, 60),
             include_correct_in_assignments: bool = True):
    """Write a complete synthetic run at `path` and return the `Run`."""
    import pandas as pd

    from erroranalysis import rundir

    rng = np.random.default_rng(seed)
    k = len(LABELS)
    label_idx = rng.integers(0, k, size=n)
    fail = np.zeros(n, dtype=bool)
    fail[rng.choice(n, size=n_failures, replace=False)] = True

    # Failures concentrate on a few confusion pairs, as real ones do; each pair gets its own cluster.
    base_pairs = [(4, 0), (0, 4), (2, 1), (1, 3), (3, 1), (2, 0), (0, 2), (4, 1)]
    pairs = [base_pairs[c % len(base_pairs)] for c in range(max(1, n_clusters))]
    pair_of_fail = rng.integers(0, len(pairs), size=n)
    pred_idx = label_idx.copy()
    for i in np.flatnonzero(fail):
        a, b = pairs[pair_of_fail[i]]
        if rng.random() < 0.75:
            label_idx[i], pred_idx[i] = a, b
        else:
            pred_idx[i] = (label_idx[i] + 1 + rng.integers(0, k - 1)) % k

    # Probabilities: the predicted class wins; failures are less confident on average.
    logits = rng.normal(0, 1, size=(n, k)).astype(np.float32)
    boost = np.where(fail, rng.uniform(0.3, 2.5, size=n), rng.uniform(1.5, 5.0, size=n)).astype(np.float32)
    logits[np.arange(n), pred_idx] += boost + np.abs(logits).max(axis=1)
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    probs = probs.astype(np.float32)
    confidence = probs[np.arange(n), pred_idx]
    loss = -np.log(np.clip(probs[np.arange(n), label_idx], 1e-12, None)).astype(np.float32)

    labels = np.array(LABELS, dtype=object)
    n_words = rng.integers(text_words[0], text_words[1], size=n)
    texts = _texts(rng, label_idx, np.where(fail, pred_idx, -1), n_words)
    source = rng.choice(np.array(["wire", "blog", "newsletter", "forum"], dtype=object), size=n,
                        p=[0.5, 0.2, 0.2, 0.1])
    # Make forum posts fail more often, so the slices table has a clear worst slice.
    pred = labels[pred_idx]
    df = pd.DataFrame({
        "example_id": [f"ex{i:06d}" for i in range(n)],
        "text": texts,
        "label": labels[label_idx],
        "pred": pred,
        "correct": ~fail,
        "confidence": confidence.astype(np.float32) if with_probs else np.full(n, np.nan, np.float32),
        "loss": loss if with_probs else np.full(n, np.nan, np.float32),
        "n_tokens": n_words.astype(np.int32) + 2,
        "truncated": n_words > text_words[1] - 3,
        "source": source,
    })
    df.loc[fail & (rng.random(n) < 0.3), "source"] = "forum"

    manifest = dict(task="classification", labels=list(LABELS),
                    model={"path": "checkpoints/news-bert", "weights_sha256": "9f2c" + "0" * 60,
                           "max_length": 256, "precision": "fp32", "batch_size": 32},
                    data={"path": "data/news_eval.jsonl", "sha256": "ab12" + "0" * 60, "rows": n,
                          "format": "jsonl", "columns": {"text": "text", "label": "label", "id": "id"},
                          "metadata_columns": ["source"]},
                    device="cpu", seed=seed)
    with rundir.create_run(path, overwrite=True, **manifest) as run:
        with run.stage("infer", {"batch_size": 32}) as staging:
            staging.write_parquet(rundir.PREDICTIONS, df)
            if with_probs:
                staging.write_npy(rundir.PROBS, probs)
        with run.stage("metrics") as staging:
            staging.write_json(rundir.METRICS, _metrics(df, probs if with_probs else None))
        if with_clusters:
            with run.stage("cluster", {"min_cluster_size": 5}) as staging:
                clusters, assignments = _clusters(df, fail, pair_of_fail, pairs, rng, include_correct_in_assignments)
                staging.write_parquet(rundir.CLUSTERS, clusters)
                staging.write_parquet(rundir.ASSIGNMENTS, assignments)
    return run


def _clusters(df, fail, pair_of_fail, pairs, rng, include_correct):
    import pandas as pd

    n = len(df)
    fail_idx = np.flatnonzero(fail)
    cluster = np.full(n, -1, dtype=np.int64)
    for i in fail_idx:
        a, b = LABELS[pairs[pair_of_fail[i]][0]], LABELS[pairs[pair_of_fail[i]][1]]
        if df.at[i, "label"] == a and df.at[i, "pred"] == b and rng.random() < 0.9:
            cluster[i] = pair_of_fail[i]
    n_clusters = len(pairs)
    radius = 6 * max(1.0, math.sqrt(n_clusters / 6))
    centers = np.stack([[math.cos(2 * math.pi * c / n_clusters) * radius * (1 + 0.25 * (c % 2)),
                         math.sin(2 * math.pi * c / n_clusters) * radius * (1 + 0.25 * (c % 2))]
                        for c in range(n_clusters)])
    xy = rng.normal(0, 3.5, size=(n, 2))
    for c in range(n_clusters):
        members = cluster == c
        xy[members] = centers[c] + rng.normal(0, 0.9, size=(members.sum(), 2))
    membership = np.where(cluster >= 0, rng.uniform(0.4, 1.0, size=n), 0.0)
    rows = []
    for c in range(n_clusters):
        members = np.flatnonzero(cluster == c)
        if len(members) == 0:
            continue
        a, b = LABELS[pairs[c][0]], LABELS[pairs[c][1]]
        top = members[np.argsort(-membership[members])][:3]
        keywords = [str(w) for w in rng.choice(_VOCAB[b], size=4, replace=False)]
        rows.append({
            "cluster_id": c,
            "size": int(len(members)),
            "name": f"{a} read as {b}: {', '.join(keywords[:2])}",
            "keywords": keywords,
            "top_confusions": [f"{a} -> {b}"],
            "exemplar_ids": [str(df.at[i, "example_id"]) for i in top],
            "mean_confidence": float(df["confidence"].to_numpy()[members].mean()),
            "mean_loss": float(df["loss"].to_numpy()[members].mean()),
        })
    clusters = pd.DataFrame(rows)
    keep = np.ones(n, dtype=bool) if include_correct else fail
    assignments = pd.DataFrame({
        "example_id": df["example_id"].to_numpy()[keep],
        "cluster_id": cluster[keep],
        "membership": membership[keep].astype(np.float32),
        "x": xy[keep, 0].astype(np.float32),
        "y": xy[keep, 1].astype(np.float32),
        "failure": fail[keep],
    })
    return clusters, assignments


def _ci(p: float, n: int) -> list[float]:
    if n == 0:
        return [0.0, 0.0]
    half = 1.96 * math.sqrt(max(p * (1 - p), 1e-12) / n)
    return [max(0.0, p - half), min(1.0, p + half)]


def _metrics(df, probs) -> dict:
    n = len(df)
    labels = LABELS
    index = {lab: i for i, lab in enumerate(labels)}
    matrix = np.zeros((len(labels), len(labels)), dtype=int)
    for t, p in zip(df["label"], df["pred"]):
        matrix[index[t], index[p]] += 1
    per_class = []
    f1s, precs, recs, supports = [], [], [], []
    for i, lab in enumerate(labels):
        tp = matrix[i, i]
        prec = tp / matrix[:, i].sum() if matrix[:, i].sum() else 0.0
        rec = tp / matrix[i].sum() if matrix[i].sum() else 0.0
        f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
        sup = int(matrix[i].sum())
        per_class.append({"label": lab, "precision": prec, "recall": rec, "f1": f1, "support": sup,
                          "f1_ci": _ci(f1, sup)})
        f1s.append(f1), precs.append(prec), recs.append(rec), supports.append(sup)
    acc = float(df["correct"].mean())
    n_fail = int((~df["correct"]).sum())
    w = np.array(supports) / max(1, n)
    overall = {"n": n, "n_failures": n_fail, "accuracy": acc, "accuracy_ci": _ci(acc, n),
               "macro_precision": float(np.mean(precs)), "macro_recall": float(np.mean(recs)),
               "macro_f1": float(np.mean(f1s)), "macro_f1_ci": _ci(float(np.mean(f1s)), n),
               "micro_precision": acc, "micro_recall": acc, "micro_f1": acc,
               "weighted_precision": float(np.dot(w, precs)), "weighted_recall": float(np.dot(w, recs)),
               "weighted_f1": float(np.dot(w, f1s))}
    out = {"overall": overall, "per_class": per_class,
           "confusion": {"labels": labels, "matrix": matrix.tolist(),
                         "normalized": (matrix / np.maximum(1, matrix.sum(axis=1, keepdims=True))).tolist()}}
    confusions = []
    for i in range(len(labels)):
        for j in range(len(labels)):
            if i != j and matrix[i, j]:
                confusions.append({"label": labels[i], "pred": labels[j], "count": int(matrix[i, j]),
                                   "share_of_failures": matrix[i, j] / max(1, n_fail)})
    out["top_confusions"] = sorted(confusions, key=lambda c: -c["count"])[:10]
    if probs is not None:
        conf = df["confidence"].to_numpy()
        correct = df["correct"].to_numpy()
        bins, edges, ece = [], np.linspace(0, 1, 16), 0.0
        for lo, hi in zip(edges[:-1], edges[1:]):
            m = (conf > lo) & (conf <= hi)
            if m.any():
                bins.append({"lower": float(lo), "upper": float(hi), "count": int(m.sum()),
                             "confidence": float(conf[m].mean()), "accuracy": float(correct[m].mean())})
                ece += m.mean() * abs(conf[m].mean() - correct[m].mean())
        onehot = np.zeros_like(probs)
        onehot[np.arange(n), [index[t] for t in df["label"]]] = 1
        brier = float(((probs - onehot) ** 2).sum(axis=1).mean())
        out["calibration"] = {"n_bins": 15, "ece": float(ece), "brier": brier, "bins": bins}
        overall["ece"], overall["brier"] = float(ece), brier
    per_slice = {}
    for column in ["source"]:
        rows = []
        for value, group in df.groupby(column):
            a = float(group["correct"].mean())
            rows.append({"value": str(value), "n": int(len(group)), "accuracy": a, "error_rate": 1 - a,
                         "macro_f1": a})
        per_slice[column] = rows
    words = df["text"].str.split().str.len()
    qs = np.quantile(words, [0, 0.25, 0.5, 0.75, 1.0])
    rows = []
    for lo, hi in zip(qs[:-1], qs[1:]):
        m = (words >= lo) & (words <= hi)
        a = float(df.loc[m, "correct"].mean()) if m.any() else 0.0
        rows.append({"value": f"{int(lo)}-{int(hi)} words", "n": int(m.sum()), "accuracy": a, "error_rate": 1 - a,
                     "macro_f1": a})
    per_slice["text_length"] = rows
    out["by_metadata"] = per_slice
    out["bootstrap"] = {"n_resamples": 0, "seed": 0, "level": 0.95}
    return out


def make_workspace(root: str | Path, **kwargs) -> Path:
    """A runs folder with two good runs (`news-a`, `news-b`, the second without clusters) and one broken run
    (`broken`, whose predictions.parquet is corrupt)."""
    from erroranalysis import rundir

    root = Path(root)
    make_run(root / "news-a", **kwargs)
    make_run(root / "news-b", n=200, n_failures=30, seed=1, with_clusters=False)
    broken = make_run(root / "broken", n=60, n_failures=10, seed=2)
    broken.file(rundir.PREDICTIONS).write_bytes(b"not a parquet file")
    broken.file(rundir.METRICS).write_text("{ not json", encoding="utf-8")
    return root
