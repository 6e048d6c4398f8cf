"""Planted failure modes across prompt topics: does the clustering of a generation run find how the model fails?

Generations (`benchmarks/quality/failure_corpora.py`, written here): three corpora (`extract`: JSON extraction with
a JSON reference; `triage`: a JSON label, priority and reason with a JSON Schema and a JSON reference; `qa`:
one-sentence answers with a text reference), five prompt topics each, modes planted with varied phrasings (prose
before or after the JSON, a code fence, cut off at max tokens, renamed keys, missing fields, wrong values,
refusals, repetition loops, answers in another language, empty outputs, rambling, wrong answers), a random number
of outputs per mode and topic, beside correct outputs. Each scenario is read through the real generation analyze
path (`load_generations.prepare_generations`, `imported_table`: the checks and signals the product runs), and the
failures are clustered by:

- `ours`: `cluster.cluster_by_mode` (what `erroranalysis analyze --task generation` runs): reasons and signals
  first, the outputs' MiniLM embedding second, the prompts' as a veto on topic splits;
- ablations: `reasons only` (no embedding), `no signals` (the checks' reasons alone), `no <signal>` (one signal's
  reasons left out), `no prompt veto`;
- `by failing check`: one group per set of failing checks (what the check names alone give);
- `before` (this tool until now): the usual clustering of the embedding of prompt and output;
- `plain`: MiniLM -> UMAP(5-d, cosine) -> HDBSCAN(min_cluster_size=10) on the outputs (the common script);
- `BERTopic`: its defaults on the outputs, with the packaged MiniLM as its embedding model.

Scores (`quality/scores.py`): mean best-F1 over planted modes, ARI, unclustered share, clusters. Seeds 0 and 1 of
every corpus are the tuning split (where `mode_attach` and `mode_topic_ari` were chosen); seeds 2 to 4 are
reported (`--split reported`, the default).

    .venv/bin/python benchmarks/failure_modes.py                      # reported split, all methods
    .venv/bin/python benchmarks/failure_modes.py --split tuned --methods ours
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from quality import failure_corpora, scores  # noqa: E402

SIGNALS = ("shape", "length", "repetition", "refusal", "language")
METHODS = ("ours", "reasons only", "no signals", *(f"no {s}" for s in SIGNALS), "no prompt veto", "by failing check",
           "before", "plain", "BERTopic")
SPLITS = {"tuned": (0, 1), "reported": (2, 3, 4)}
SIGNAL_REASON = re.compile(r"^(shape|length|repetition|refusal|language): ")


def checked(rows: list[dict]):
    """The rows through the real analyze path: the checks' and signals' verdicts and reasons, per row."""
    from erroranalysis.infer.generation import GenerationParams
    from erroranalysis.sources.generations import SourceParams
    from erroranalysis.sources.table import DataOptions
    from erroranalysis.stages.load_generations import imported_table, prepare_generations

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "outputs.jsonl"
        path.write_text("".join(json.dumps({k: v for k, v in r.items() if k not in ("mode", "topic")}) + "\n"
                                for r in rows))
        prepared = prepare_generations(path, DataOptions(id_column="id"), GenerationParams(), SourceParams())
        return imported_table(prepared), prepared["checks"]


def embedder():
    from erroranalysis.embed.models import MiniLMEmbedder

    return MiniLMEmbedder()


def by_check(reasons: list[str]) -> np.ndarray:
    keys = [" + ".join(sorted({r.split(":")[0] for r in reason.split("; ")})) for reason in reasons]
    return np.unique(keys, return_inverse=True)[1].reshape(-1)


def before(vectors: np.ndarray, seed: int) -> np.ndarray:
    from erroranalysis.cluster import ClusteringParams, FailureClustering

    return FailureClustering(ClusteringParams(seed=seed, error_aware=False)).fit(vectors).result_.labels


def bertopic(texts: list[str], vectors: np.ndarray, model) -> np.ndarray:
    from bertopic import BERTopic

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        topics, _ = BERTopic(embedding_model=model).fit_transform(texts, embeddings=vectors)
    return np.asarray(topics)


def run_methods(failures, truth, emb, seed: int, methods, params) -> dict:
    from quality.methods import plain

    from erroranalysis.cluster import cluster_by_mode

    reasons = failures["failure_reason"].astype(str).tolist()
    outputs = failures["output"].fillna("").astype(str).tolist()
    prompts = failures["prompt"].fillna("").astype(str).tolist()
    vectors = emb.embed_texts(outputs)
    prompt_vectors = emb.embed_texts(prompts)
    found = {}
    for name in methods:
        start = time.perf_counter()
        if name == "ours":
            labels = cluster_by_mode(reasons, vectors, prompt_vectors, params).labels
        elif name == "reasons only":
            labels = cluster_by_mode(reasons, None, None, params).labels
        elif name == "no signals":
            bare = ["; ".join(p for p in r.split("; ") if not SIGNAL_REASON.match(p)) for r in reasons]
            labels = cluster_by_mode(bare, vectors, prompt_vectors, params).labels
        elif name.removeprefix("no ") in SIGNALS:
            bare = ["; ".join(p for p in r.split("; ") if not p.startswith(name.removeprefix("no ") + ": "))
                    for r in reasons]
            labels = cluster_by_mode(bare, vectors, prompt_vectors, params).labels
        elif name == "no prompt veto":
            labels = cluster_by_mode(reasons, vectors, prompt_vectors, params.replace(mode_topic_ari=1.0)).labels
        elif name == "by failing check":
            labels = by_check(reasons)
        elif name == "before":
            labels = before(emb.embed_texts([f"{p}\n\n{o}" for p, o in zip(prompts, outputs)]), seed)
        elif name == "plain":
            labels = plain(vectors, seed)
        else:
            labels = bertopic(outputs, vectors, _sentence_model())
        found[name] = (scores.score(truth, labels, int(truth.max()) + 1), time.perf_counter() - start)
    return found


_MODEL = None


def _sentence_model():
    """The packaged all-MiniLM-L6-v2 as a sentence-transformers model, for BERTopic (offline)."""
    global _MODEL
    if _MODEL is None:
        from sentence_transformers import SentenceTransformer

        from erroranalysis.embed.models import minilm_path

        _MODEL = SentenceTransformer(str(minilm_path()), device="cpu")
    return _MODEL


def main() -> None:
    from common import load_average, table

    from erroranalysis.cluster import ClusteringParams

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--split", choices=("tuned", "reported", "all"), default="reported")
    parser.add_argument("--corpora", nargs="+", default=list(failure_corpora.CORPORA))
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--attach", type=float, default=None, help="override mode_attach (tuning)")
    parser.add_argument("--topic-ari", type=float, default=None, help="override mode_topic_ari (tuning)")
    args = parser.parse_args()
    seeds = SPLITS["tuned"] + SPLITS["reported"] if args.split == "all" else SPLITS[args.split]
    print(f"failure modes: corpora {', '.join(args.corpora)}, seeds {seeds}; {load_average()}")
    emb = embedder()
    totals: dict[str, list] = {m: [] for m in args.methods}
    for corpus in args.corpora:
        for seed in seeds:
            rows = failure_corpora.scenario(corpus, seed)
            table_, checks = checked(rows)
            failed = ~table_["correct"].to_numpy()
            modes = sorted({r["mode"] for r in rows if r["mode"]})
            truth = np.array([modes.index(r["mode"]) if r["mode"] else -1 for r in rows])[failed]
            clean_failing = int(sum(1 for r, f in zip(rows, failed) if f and not r["mode"]))
            planted_passing = int(sum(1 for r, f in zip(rows, failed) if not f and r["mode"]))
            overrides = {k: v for k, v in (("mode_attach", args.attach), ("mode_topic_ari", args.topic_ari))
                         if v is not None}
            params = ClusteringParams(seed=seed, **overrides)
            found = run_methods(table_[failed].reset_index(drop=True), truth, emb, seed, args.methods, params)
            print(f"\n[{corpus}-{seed}] {len(rows)} outputs, {int(failed.sum())} failing, {len(modes)} modes x "
                  f"{len({r['topic'] for r in rows})} topics; checks {', '.join(checks)}; clean outputs failing "
                  f"{clean_failing}, planted modes passing {planted_passing}")
            for name, (s, seconds) in found.items():
                totals[name].append(s)
                print(f"  {name:18s} F1 {s['mean_f1']:.3f}  ARI {s['ari']:.3f}  unclustered {s['noise']:5.1%}  "
                      f"clusters {s['clusters']:3d}  {seconds:6.1f} s")
    rows_out = [[m, f"{np.mean([s['mean_f1'] for s in v]):.3f}", f"{np.mean([s['ari'] for s in v]):.3f}",
                 f"{np.mean([s['noise'] for s in v]):.1%}", f"{np.mean([s['clusters'] for s in v]):.1f}"]
                for m, v in totals.items()]
    print(f"\nmean over {len(next(iter(totals.values())))} scenarios ({args.split} split)")
    print(table(rows_out, ["method", "best-F1", "ARI", "unclustered", "clusters"]))


if __name__ == "__main__":
    main()
