"""Planted label flips: does comparing an example's label with its neighbours' beat the model's self-confidence?

Corpora from BBC News (`benchmarks/quality/corpora.py`): long documents, single sentences and titles. Each is split
in half (seeded, stratified): a model trained on one half gives out-of-sample probabilities for the other, the
eval half, whose given labels are then flipped to another class for a share of examples (5% or 10%). Models of
several accuracies, all on TF-IDF features (a different view of the text than the MiniLM vectors the
neighbours come from, as a fine-tuned classifier is): logistic regression on the whole training half, on a
tenth of it, and on the 300 most frequent words. Methods, on the same probabilities and vectors:

- self-confidence: cleanlab's score on the model's probabilities alone (what `erroranalysis checks` did);
- neighbours: the labels of the k most similar eval examples alone (`neighbor_label_probs`);
- combined: `find_label_issues(..., vectors=...)`, the mixture of both (the default weight and k, and a small
  grid around them);
- Datalab: cleanlab's `Datalab.find_issues(pred_probs=..., features=...)` label check, when `--datalab`.

Score: the share of the flips among the top 10% of examples by score (what a reviewer looking at a tenth of the
set finds), and the precision and recall of the flags. Every third scenario is held out from choosing the weight.

    .venv/bin/python benchmarks/label_issues.py            # 3 corpora x 3 models x 2 noise rates x 2 seeds
    .venv/bin/python benchmarks/label_issues.py --quick    # one seed, 5% noise
    .venv/bin/python benchmarks/label_issues.py --scale 1000000   # the batched path at a million rows
    .venv/bin/python benchmarks/label_issues.py --embedders minilm static static-384   # the static model beside
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from quality import corpora  # noqa: E402

from erroranalysis.datachecks.label_issues import (  # noqa: E402
    KNN_K,
    KNN_WEIGHT,
    find_label_issues,
    neighbor_label_probs,
)

MODELS = {"full": dict(share=1.0, max_features=50_000), "tenth": dict(share=0.1, max_features=50_000),
          "300 words": dict(share=1.0, max_features=300)}
GRID = [(w, k) for w in (0.3, 0.5, 0.7) for k in (5, 10, 20)]


def model_probs(frame: pd.DataFrame, train: np.ndarray, evals: np.ndarray, share: float, max_features: int,
                seed: int) -> np.ndarray:
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(seed)
    rows = train if share >= 1 else np.sort(rng.choice(train, max(50, int(share * len(train))), replace=False))
    vec = TfidfVectorizer(min_df=2, sublinear_tf=True, max_features=max_features)
    X = vec.fit_transform(frame["text"].to_numpy()[rows])
    model = LogisticRegression(C=2.0, max_iter=1000).fit(X, frame["label"].to_numpy()[rows])
    return model.predict_proba(vec.transform(frame["text"].to_numpy()[evals])).astype(np.float32)


def top_share(scores: np.ndarray, truth: np.ndarray, fraction: float = 0.1) -> float:
    """Share of the true issues among the top `fraction` of examples by score."""
    top = np.argsort(-scores, kind="stable")[: int(round(fraction * len(scores)))]
    return float(truth[top].sum() / max(truth.sum(), 1))


def datalab_scores(labels, probs, vectors):
    import warnings

    from cleanlab import Datalab

    data = pd.DataFrame({"label": labels})
    lab = Datalab(data, label_name="label", verbosity=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lab.find_issues(pred_probs=probs, features=vectors, issue_types={"label": {}})
    issues = lab.get_issues("label")
    return 1 - issues["label_score"].to_numpy(), issues["is_label_issue"].to_numpy()


def run(args) -> pd.DataFrame:
    records = []
    for corpus in args.corpora:
        frame = corpora.load(corpus)
        vectors = corpora.embeddings(corpus, frame)
        others = {e: corpora.embeddings(corpus, frame, e) for e in args.embedders if e != "minilm"}
        classes = sorted(frame["label"].unique())
        index = 0
        for seed in args.seeds:
            rng = np.random.default_rng(seed)
            order = rng.permutation(len(frame))
            train, evals = np.sort(order[: len(frame) // 2]), np.sort(order[len(frame) // 2:])
            for model, spec in MODELS.items():
                probs = model_probs(frame, train, evals, seed=seed, **spec)
                true = frame["label"].to_numpy()[evals]
                accuracy = float((np.array(classes)[probs.argmax(1)] == true).mean())
                for noise in args.noise:
                    held_out = index % 3 == 2
                    index += 1
                    r = np.random.default_rng([seed, int(noise * 1000)])
                    flips = r.random(len(evals)) < noise
                    given = true.copy().astype(object)
                    for i in np.flatnonzero(flips):
                        given[i] = r.choice([c for c in classes if c != true[i]])
                    v = vectors[evals]
                    wrong = (np.array(classes)[probs.argmax(1)] != given) & ~flips  # the model's own errors
                    methods = {"self-confidence": dict(vectors=None)}
                    methods["combined"] = dict(vectors=v)
                    for e, other in others.items():
                        methods[f"combined {e}"] = dict(vectors=other[evals])
                    for w, k in GRID if args.grid else []:
                        methods[f"combined w={w} k={k}"] = dict(vectors=v, knn_weight=w, k=k)
                    results = {}
                    for name, params in methods.items():
                        t = time.perf_counter()
                        found = find_label_issues(given, probs, classes, **params)
                        results[name] = (found["label_issue_score"].to_numpy(), found["label_issue"].to_numpy(),
                                         time.perf_counter() - t)
                    t = time.perf_counter()
                    ids = np.searchsorted(classes, given.astype(str))
                    knn = neighbor_label_probs(v, ids, len(classes), k=KNN_K)
                    results["neighbours"] = (1 - knn[np.arange(len(ids)), ids], None, time.perf_counter() - t)
                    if args.datalab:
                        t = time.perf_counter()
                        s, f = datalab_scores(given.astype(str), probs, v)
                        results["Datalab"] = (s, f, time.perf_counter() - t)
                    for name, (score, flags, seconds) in results.items():
                        records.append({
                            "corpus": corpus, "model": model, "accuracy": accuracy, "noise": noise, "seed": seed,
                            "held_out": held_out, "method": name, "top10": top_share(score, flips),
                            "model_errors_top10": top_share(score, wrong),
                            "flag_precision": float(flips[flags].mean()) if flags is not None and flags.any()
                            else float("nan"),
                            "flag_recall": float(flags[flips].mean()) if flags is not None else float("nan"),
                            "seconds": seconds})
                    best = {m: records[-len(results) + i]["top10"] for i, m in enumerate(results)}
                    print(f"[{corpus} {model} acc {accuracy:.2f} noise {noise:.0%} seed {seed}"
                          f"{' held-out' if held_out else ''}] "
                          + "  ".join(f"{m} {x:.2f}" for m, x in best.items() if "w=" not in m))
    return pd.DataFrame(records)


def report(table: pd.DataFrame) -> None:
    fmt = {"display.width": 250, "display.max_columns": None, "display.float_format": "{:.3f}".format}
    with pd.option_context(*[x for kv in fmt.items() for x in kv]):
        main = table[~table["method"].str.contains("w=")]
        print("\n== Share of planted flips in the top 10% (mean over seeds and noise rates)")
        print(main.pivot_table(index=["corpus", "model"], columns="method", values="top10", aggfunc="mean"))
        print("\n== Same, with the models' accuracies")
        print(main.groupby(["corpus", "model"])["accuracy"].mean())
        print("\n== Union (tuned / held-out scenarios)")
        print(main.assign(split=np.where(main["held_out"], "held-out", "tuned"))
              .pivot_table(index="split", columns="method", values="top10", aggfunc="mean"))
        print("\n== Flags: precision / recall of cleanlab's label_issue flag; the model's own errors in the top 10%")
        print(main.groupby("method")[["flag_precision", "flag_recall", "model_errors_top10", "seconds"]].mean())
        grid = table[table["method"].str.contains("w=") & ~table["held_out"]]
        if len(grid):
            print("\n== Grid on the tuned scenarios (top-10% share of flips)")
            print(grid.groupby("method")["top10"].mean().sort_values(ascending=False))
        gain = main.pivot_table(index=["corpus", "model", "noise", "seed"], columns="method", values="top10")
        d = gain["combined"] - gain["self-confidence"]
        print(f"\ncombined - self-confidence: {d.mean():+.3f} on average (min {d.min():+.3f}, max {d.max():+.3f}; "
              f"default weight {KNN_WEIGHT}, k {KNN_K})")
        for column in [c for c in gain.columns if c.startswith("combined ") and "w=" not in c]:
            d = gain[column] - gain["combined"]
            print(f"{column} - combined (MiniLM): {d.mean():+.3f} on average (min {d.min():+.3f}, max {d.max():+.3f})")


def scale(rows: int, classes: int = 20, dim: int = 384) -> None:
    """The batched path at `rows` examples: wall time and peak memory above the inputs, beside cleanlab's
    unbatched `find_label_issues` + `get_label_quality_scores` on the same probabilities (no neighbours)."""
    import subprocess

    code = f"""
import sys, time, numpy as np
sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})

def status(key):
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(key)) / 1024

rng = np.random.default_rng(0)
n, c, d = {rows}, {classes}, {dim}
true = rng.integers(0, c, n)
probs = rng.random((n, c), dtype=np.float32)
probs[np.arange(n), true] += 3 * rng.random(n, dtype=np.float32)
probs /= probs.sum(1, keepdims=True)
vectors = np.empty((n, d), dtype=np.float32)
centres = rng.standard_normal((c, d), dtype=np.float32) * 2
for a in range(0, n, 100_000):
    vectors[a:a + 100_000] = centres[true[a:a + 100_000]] + rng.standard_normal((len(true[a:a + 100_000]), d),
                                                                                dtype=np.float32)
given = true.copy(); flip = rng.random(n) < 0.05; given[flip] = (true[flip] + 1) % c
names = [str(i) for i in range(c)]
labels = np.array(names, dtype=object)[given]
open("/proc/self/clear_refs", "w").write("5")  # the peak (VmHWM) counts from here
base = status("VmRSS")
t = time.perf_counter()
if sys.argv[1] == "ours":
    from erroranalysis.datachecks.label_issues import find_label_issues
    score = find_label_issues(labels, probs, names, vectors=vectors)["label_issue_score"].to_numpy()
else:
    from cleanlab.filter import find_label_issues
    from cleanlab.rank import get_label_quality_scores
    flags = find_label_issues(given, probs, n_jobs=1)
    score = 1 - get_label_quality_scores(given, probs)
top = np.argsort(-score)[: n // 10]
print(time.perf_counter() - t, status("VmHWM") - base, flip[top].sum() / flip.sum())
"""
    print(f"\n== {rows:,} rows, {classes} classes, {dim}-d vectors (inputs: "
          f"{rows * (classes + dim) * 4 / 2**20:,.0f} MiB), {os.getloadavg()[0]:.1f} load on {os.cpu_count()} cores")
    for who in ("cleanlab", "ours"):
        out = subprocess.run([sys.executable, "-c", code, who], capture_output=True, text=True)
        if out.returncode:
            print(who, "failed:", out.stderr[-800:])
            continue
        seconds, extra, share = map(float, out.stdout.split())
        label = ("cleanlab find_label_issues + quality scores (probabilities only)" if who == "cleanlab" else
                 "find_label_issues(vectors=...): batched scores and flags, neighbours among a 20,000-row sample")
        print(f"  {label}: {seconds:.1f} s, {extra:,.0f} MiB above the inputs, flips in the top 10%: {share:.3f}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpora", nargs="+", default=list(corpora.CORPORA), choices=corpora.CORPORA)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--noise", nargs="+", type=float, default=[0.05, 0.10])
    parser.add_argument("--grid", action="store_true", help="also the small grid of weights and k")
    parser.add_argument("--datalab", action="store_true", help="also cleanlab's Datalab label check")
    parser.add_argument("--quick", action="store_true", help="seed 0, 5% noise")
    parser.add_argument("--scale", type=int, default=0, help="only the batched path at this many rows")
    parser.add_argument("--embedders", nargs="+", default=["minilm"],
                        help="also the combined score with these vectors: static, static-<pca dims>")
    args = parser.parse_args(argv)
    if args.scale:
        scale(args.scale)
        return
    if args.quick:
        args.seeds, args.noise = [0], [0.05]
    table = run(args)
    out = Path(__file__).resolve().parent / "out" / "label_issues.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(out, index=False)
    report(table)


if __name__ == "__main__":
    main()
