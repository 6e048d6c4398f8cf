"""Taxonomy carry-over: label one run, apply its taxonomy to a second run of the same eval set, measure agreement.

With the sample (ERRORANALYSIS_SAMPLE set, `make sample`): run A is the sample checkpoint over the sample eval set.
Two second runs over the same eval set: B1, the sample checkpoint fine-tuned one more epoch on the sample's
validation split (the usual "change one thing"), and B2, a checkpoint trained from all-MiniLM-L6-v2 on the
validation split alone (another model, other mistakes); both are cached under benchmarks/out/carryover/. The truth:
an engineer labels each failure of A by its confusion ("business read as tech"), for every confusion with at least
--min-type failures; rarer confusions stay unlabeled. In B, a failure's true type is its confusion when A's
taxonomy has it, else "new" (it should stay unmatched).

Without the sample: a synthetic eval set whose failures carry a known kind (the topic whose words intrude on the
text; one kind is never labeled), and two "models" that fail on overlapping random subsets.

apply-taxonomy (nearest error-type centroid in all-MiniLM-L6-v2 space, calibrated threshold, confusion-specific types
held to their confusion) is printed beside the peer a user would otherwise use: carrying labels over by example id (a
join), which labels only the failures B shares with A; and beside its own variants with parts switched off.

Usage: .venv/bin/python benchmarks/taxonomy_carryover.py [--min-type 5]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, load_average, table  # noqa: E402

OUT = ROOT / "benchmarks" / "out" / "carryover"


def continue_training(checkpoint: Path, rows: list[dict], out: Path, *, epochs: int = 1, lr: float = 5e-5,
                      max_length: int = 32, seed: int = 13) -> Path:
    """The checkpoint fine-tuned further on `rows` (a plain AdamW loop, as the sample was trained)."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    model = AutoModelForSequenceClassification.from_pretrained(checkpoint)
    label2id = model.config.label2id
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    model.train()
    order = np.random.default_rng(seed)
    for _ in range(epochs):
        idx = order.permutation(len(rows))
        for start in range(0, len(idx), 16):
            batch = [rows[i] for i in idx[start:start + 16]]
            enc = tokenizer([r["text"] for r in batch], truncation=True, max_length=max_length, padding=True,
                            return_tensors="pt")
            loss = model(**enc, labels=torch.tensor([label2id[r["label"]] for r in batch])).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    out.mkdir(parents=True, exist_ok=True)
    model.eval()
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


def sample_runs(min_type: int):
    """Run A (the sample checkpoint) and two second runs, B1 (A fine-tuned one more epoch on the validation split)
    and B2 (a checkpoint trained from all-MiniLM-L6-v2 on the validation split alone); truth = the confusion."""
    from erroranalysis.sources.table import DataOptions
    from erroranalysis.stages import AfterParams, InferParams, run_checkpoint

    sample = Path(os.environ["ERRORANALYSIS_SAMPLE"])
    if not (sample / ".built").exists():
        raise SystemExit(f"no sample at {sample}; run `make sample` first")
    rows = {name: [json.loads(x) for x in open(sample / f"{name}.jsonl", encoding="utf-8")]
            for name in ("train", "validation")}
    continued = OUT / "model_continued"
    if not (continued / "config.json").is_file():
        t = time.perf_counter()
        continue_training(sample / "checkpoint", rows["validation"], continued)
        print(f"B1: fine-tuned the sample checkpoint one more epoch on the validation split in "
              f"{time.perf_counter() - t:.0f} s")
    scratch = OUT / "model_scratch" / "checkpoint"
    if not (scratch / "config.json").is_file():
        spec = importlib.util.spec_from_file_location("sample_build", ROOT / "sample_data" / "build.py")
        build = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(build)
        t = time.perf_counter()
        build.train({"train": rows["validation"], "validation": rows["train"]}, OUT / "model_scratch")
        print(f"B2: trained a checkpoint on the validation split in {time.perf_counter() - t:.0f} s")
    made = {}
    for name, model in (("a", sample / "checkpoint"), ("continued", continued), ("scratch", scratch)):
        path = OUT / "runs" / name
        if not (path / "predictions.parquet").is_file():
            t = time.perf_counter()
            run_checkpoint(model, sample / "eval.jsonl", path, data_opts=DataOptions(id_column="id"),
                           infer_opts=InferParams(batch_size=32, max_length=128), after=AfterParams(cluster=None),
                           overwrite=True)
            print(f"run {name}: inference over the eval set in {time.perf_counter() - t:.0f} s")
        made[name] = path
    return made["a"], [("B1: A + one more epoch on other data", made["continued"]),
                       ("B2: trained from scratch on other data", made["scratch"])], ["confusion", "topic"]


def synthetic_runs(min_type: int):
    """Synthetic texts: topic words, plus for failures words of an intruding topic (the error kind)."""
    from erroranalysis import rundir

    rng = np.random.default_rng(0)
    vocab = {
        "business": "shares market profit bank economy growth investors deal firm sales quarter prices".split(),
        "entertainment": "film music award star band album actor festival show singer box office".split(),
        "politics": "minister election party government vote labour tory campaign policy parliament".split(),
        "sport": "match cup team coach season injury win league players final goal champion".split(),
        "tech": "software mobile phone internet users broadband game online digital computer virus".split(),
        "weather": "rain storm snow flood wind forecast cold heat frost drought cloud thunder".split(),
    }
    filler = "the a of to and in said that for on was is with by it at from has have will year new".split()
    labels = ["business", "entertainment", "politics", "sport", "tech"]
    n = 1000
    gold = rng.choice(labels, n)
    intruder = np.array([rng.choice([t for t in vocab if t != g]) for g in gold])  # weather = the never-labeled kind
    hard = rng.random(n) < 0.35
    texts = []
    for g, x, h in zip(gold, intruder, hard):
        words = list(rng.choice(filler, 14)) + list(rng.choice(vocab[g], 5))
        if h:
            words += list(rng.choice(vocab[x], 6))
        rng.shuffle(words)
        texts.append(" ".join(words).capitalize() + ".")
    ids = [f"s{i:04d}" for i in range(n)]
    made = {}
    for name, seed in (("a", 1), ("b", 2)):
        r = np.random.default_rng(seed)
        fail = hard & (r.random(n) < 0.7) | (r.random(n) < 0.03)
        shift = r.integers(1, len(labels), n)  # any wrong label: a kind is not tied to one confusion
        pred = np.where(fail, [labels[(labels.index(g) + d) % len(labels)] for g, d in zip(gold, shift)], gold)
        df = pd.DataFrame({"example_id": ids, "text": texts, "label": gold, "pred": pred, "correct": pred == gold,
                           "confidence": np.float32(np.nan), "loss": np.float32(np.nan),
                           "n_tokens": np.int32(25), "truncated": False, "kind": np.where(hard, intruder, "")})
        path = OUT / "synthetic" / name
        run = rundir.Run.create(path, overwrite=True, task="classification", labels=labels,
                              data={"path": "synthetic", "sha256": "synthetic", "rows": n}, seed=0)
        with run.stage("load_predictions"):
            rundir.write_parquet(run.file(rundir.PREDICTIONS), df)
        made[name] = path
    return made["a"], [("B: another model", made["b"])], ["kind"]


def truths(rule: str, fa: pd.DataFrame, variants: dict[str, pd.DataFrame], min_type: int):
    """(type of each failure of A and of each B, the types A's taxonomy gets, what the rule means)."""
    frames = {"A": fa, **variants}
    if rule == "confusion":
        typed = {k: f["label"] + " read as " + f["pred"] for k, f in frames.items()}
        what = ("an engineer labels each failure of A by its confusion ('business read as tech'), every confusion "
                f"with >= {min_type} failures; rarer ones stay unlabeled")
    elif rule == "kind":
        typed = {k: f["kind"].where(f["kind"] != "", "none").map(lambda x: f"{x} words intrude")
                 for k, f in frames.items()}
        what = (f"each failure's planted kind (the topic whose words intrude), every kind with >= {min_type} failures "
                "in A except 'weather', never labeled")
    else:
        typed, what = topic_truth(frames, min_type)
    counts = typed["A"].value_counts()
    types = sorted(t for t, c in counts.items() if c >= min_type and not t.startswith(("none", "weather", "held out")))
    return typed, types, what


def topic_truth(frames: dict[str, pd.DataFrame], min_type: int, k: int = 8, seed: int = 0):
    """Types defined by what the failing texts are about, independent of any model's confusion and of the embedder
    that matches: k-means over TF-IDF vectors of every run's failing texts; each topic is named by its top words.
    The topic with the fewest failures in A (of those with >= min_type) is held out, never labeled: a new type."""
    from sklearn.cluster import KMeans
    from sklearn.feature_extraction.text import TfidfVectorizer

    texts = {}
    for f in frames.values():
        texts.update(zip(f["example_id"], f["text"]))
    ids = sorted(texts)
    vec = TfidfVectorizer(stop_words="english", min_df=3, max_df=0.5, sublinear_tf=True)
    x = vec.fit_transform([texts[i] for i in ids])
    km = KMeans(n_clusters=k, n_init=10, random_state=seed).fit(x)
    words = np.array(vec.get_feature_names_out())
    names = [f"about {', '.join(words[np.argsort(-c)[:3]])}" for c in km.cluster_centers_]
    topic = dict(zip(ids, (names[c] for c in km.labels_)))
    typed = {key: f["example_id"].map(topic) for key, f in frames.items()}
    counts = typed["A"].value_counts()
    eligible = counts[counts >= min_type]
    held = eligible.index[-1] if len(eligible) > 1 else None
    if held is not None:
        typed = {key: t.where(t != held, "held out: " + held) for key, t in typed.items()}
    what = (f"k-means (k={k}) over TF-IDF vectors of all failing texts, a grouping by what the failures are about, "
            f"made without any model's predictions or the matching embedder; topics with >= {min_type} failures in A "
            f"are labeled there, except one held out as a type A's taxonomy lacks ({held!r})")
    return typed, what


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min-type", type=int, default=5, help="failures a confusion needs to become a type")
    args = parser.parse_args()

    from erroranalysis import rundir, stages
    from erroranalysis.labels import LabelStore, matching

    OUT.mkdir(parents=True, exist_ok=True)
    if os.environ.get("ERRORANALYSIS_SAMPLE"):
        run_a, variants, rules = sample_runs(args.min_type)
        source = f"sample ({os.environ['ERRORANALYSIS_SAMPLE']})"
    else:
        run_a, variants, rules = synthetic_runs(args.min_type)
        source = "synthetic (set ERRORANALYSIS_SAMPLE for the real sample)"
    def failures(path: Path) -> pd.DataFrame:
        p = rundir.Run.open(path).predictions()
        p["example_id"] = p["example_id"].astype(str)
        return p

    a = failures(run_a)
    fa = a[~a["correct"]].copy()
    bs = {title: failures(path) for title, path in variants}
    print(f"Taxonomy carry-over on the {source}; {load_average()}")
    print(f"run A: {len(a):,} examples, accuracy {a['correct'].mean():.1%}, {len(fa):,} failures")
    for title, b in bs.items():
        fb = b[~b["correct"]]
        print(f"{title}: accuracy {b['correct'].mean():.1%}, {len(fb):,} failures "
              f"({int(fb['example_id'].isin(fa['example_id']).sum()):,} also failing in A)")
    for rule in rules:
        typed, types, what = truths(rule, fa, {t: b[~b["correct"]] for t, b in bs.items()}, args.min_type)
        # label run A with the truth, as an engineer would in the app, and export its taxonomy
        db = OUT / f"labels_{rule}.sqlite"
        for suffix in ("", "-wal", "-shm"):
            Path(str(db) + suffix).unlink(missing_ok=True)
        store = LabelStore(db, user="bench")
        key = store.run_key(rundir.Run.open(run_a))
        for t in types:
            store.create_error_type(t)
            store.assign(key, fa.loc[(typed["A"] == t).to_numpy(), "example_id"].tolist(), t)
        tax = stages.export_taxonomy(run_a, "json", OUT / f"taxonomy_{rule}.json", labels_db=db)
        print()
        print(f"== truth: {rule}: {what}")
        print(f"A's taxonomy: {len(types)} error types, {int(typed['A'].isin(types).sum()):,} of {len(fa):,} "
              "failures labeled")
        for title, path in variants:
            fb = bs[title][~bs[title]["correct"]]
            truth = {ex: (t if t in types else None) for ex, t in zip(fb["example_id"], typed[title])}
            in_a = set(fa["example_id"])
            shared = {ex: t for ex, t in truth.items() if ex in in_a}
            fresh = {ex: t for ex, t in truth.items() if ex not in in_a}
            print()
            print(f"{title}: {len(fb):,} failures, {len(shared):,} shared with A, {len(fresh):,} new; "
                  f"{sum(t is None for t in truth.values()):,} of a type A's taxonomy does not have")
            rows = []

            def score(name: str, suggestions: pd.DataFrame, seconds: float | None) -> None:
                all_, sh, fr = (matching.agreement(suggestions, t) for t in (truth, shared, fresh))
                rows.append([name, pct(all_["agreement"]), pct(all_["accuracy_known"]),
                             pct(all_["coverage_known"]), pct(all_["precision"]), pct(all_["unmatched_recall"]),
                             pct(sh["agreement"]), pct(fr["agreement"]), "" if seconds is None else f"{seconds:.1f}"])

            # the peer: carry labels over by example id
            known = typed["A"].isin(types).to_numpy()
            carried = dict(zip(fa.loc[known, "example_id"], typed["A"][known]))
            join = pd.DataFrame({"example_id": fb["example_id"],
                                 "status": ["suggested" if ex in carried else "unmatched" for ex in fb["example_id"]],
                                 "error_type": [carried.get(ex) for ex in fb["example_id"]]})
            score("join by example id (peer)", join, None)
            default = None
            for label, kwargs in (("apply-taxonomy (default: centroid)", {}),
                                  ("apply-taxonomy knn (k=5)", {"method": "knn"}),
                                  ("apply-taxonomy, confusions ignored", {"confusions": False}),
                                  ("apply-taxonomy, no threshold", {"threshold": 2.0}),
                                  ("apply-taxonomy, neither", {"threshold": 2.0, "confusions": False})):
                t = time.perf_counter()
                result = stages.suggest(tax, path, **kwargs)
                score(label, result.suggestions, time.perf_counter() - t)
                default = default or result
            print(table(rows, ["method", "agreement", "right type (known)", "typed (known)", "precision",
                               "new left unmatched", "agree: shared", "agree: new failures", "seconds"]))
            print(f"default threshold: {default.threshold_basis}")
            for note in default.notes[1:]:
                print(f"note: {note[:240]}")
    print()
    print("agreement = share of B's failures given the right outcome (their type, or unmatched when A's taxonomy "
          "lacks it); right type / typed = among failures of a known type; precision = share of suggestions that "
          "are right; shared / new = failures B shares with A / new in B. Seconds include embedding; the embedding "
          "cache serves texts seen before.")


def pct(value: float) -> str:
    return "–" if value != value else f"{value:.1%}"


if __name__ == "__main__":
    main()
