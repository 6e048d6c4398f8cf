"""Contamination of a generation run's prompts with the training data: time of erroranalysis's hashed 13-gram
search at 1M training rows x 10k eval rows, how it grows with the training rows, beside lm-evaluation-harness's
decontamination code (its `Janitor`, Python mode: the C++ `janitor_util` is not built by pip) and a plain
set-of-n-grams approach; and MinHash LSH near-duplicates against exact Jaccard search on planted near-duplicates.

    .venv/bin/python benchmarks/contamination.py                     # 10k, 100k, 1M training rows; peers at 100k
    .venv/bin/python benchmarks/contamination.py --sizes 10000,100000 --peer-rows 10000   # quicker
    .venv/bin/python benchmarks/contamination.py --sizes 0 --near-rows 20000               # near duplicates only

The data: synthetic texts over a Zipf-distributed 30,000-word vocabulary (train rows of 20 to 80 words, eval
prompts of 15 to 60), 1% of the eval prompts carrying a 20-word span copied from a training row, cased and
punctuated differently. Every method must find exactly the planted rows (checked). Each method runs in this
process after the texts are built; the time is wall seconds of the search alone (normalizing, hashing, lookup).

- ours:          `find_contamination(eval, chunked(train), n=13)`: the check `data-checks --train` runs, with the
                 matched training row of each eval text
- lm_eval:       `Janitor(ngram_n=13)`: `register_contaminant_python` for each eval prompt, then for each training
                 row whether one of its n-grams is registered (`word_ngrams` over `normalize_string`, as
                 `clean_python` does, stopping at the first hit); tells contaminated training rows, not which eval
                 row
- python_sets:   a dict from each eval 13-gram (a tuple of words) to its eval rows, every training row's n-grams
                 looked up in it (what one writes by hand)
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import load_average, table  # noqa: E402

N = 13
VOCAB_SIZE = 30_000


def make_texts(n_train: int, n_eval: int, seed: int = 0) -> tuple[list[str], list[str], dict[int, int]]:
    rng = np.random.default_rng(seed)
    vocab = np.array([f"w{i}" for i in range(VOCAB_SIZE)], dtype=object)
    ranks = np.arange(1, VOCAB_SIZE + 1)
    p = (1 / ranks) / (1 / ranks).sum()

    def texts(n, low, high):
        lengths = rng.integers(low, high + 1, n)
        flat = vocab[rng.choice(VOCAB_SIZE, int(lengths.sum()), p=p)]
        ends = np.cumsum(lengths)
        return [" ".join(flat[e - k:e]) for e, k in zip(ends, lengths)]

    train = texts(n_train, 20, 80)
    evals = texts(n_eval, 15, 60)
    planted = {}
    r = random.Random(seed)
    for i in r.sample(range(n_eval), n_eval // 100):
        row = r.randrange(n_train)
        span = " ".join(train[row].split()[:20])
        evals[i] = f"Question: {span.upper()}, {evals[i]}?"
        planted[i] = row
    return train, evals, planted


def ours(train, evals):
    from erroranalysis.datachecks.contamination import chunked, find_contamination

    found = find_contamination(evals, chunked(train), n=N)
    return set(np.flatnonzero(found["contaminated"]).tolist()), found


def lm_eval_janitor(train, evals):
    """Training rows with a registered n-gram (lm-eval's own functions); then the eval rows they touch are found
    by a second pass over those rows only, so the result compares with ours."""
    from lm_eval.decontamination.janitor import Janitor, word_ngrams

    jan = Janitor(ngram_n=N)
    for text in evals:
        jan.register_contaminant_python(text)
    dirt = jan.dirt_ngrams
    dirty_rows = [row for row, text in enumerate(train)
                  if any(g in dirt for g in word_ngrams(jan.normalize_string(text), N))]
    eval_grams = [set(word_ngrams(jan.normalize_string(t), N)) for t in evals]
    touched = set()
    for row in dirty_rows:
        grams = set(word_ngrams(jan.normalize_string(train[row]), N))
        touched |= {i for i, g in enumerate(eval_grams) if g & grams}
    return touched


def python_sets(train, evals):
    from erroranalysis.datachecks.contamination import ngrams

    index: dict[tuple, list[int]] = {}
    for i, text in enumerate(evals):
        for g in set(ngrams(text, N)):
            index.setdefault(g, []).append(i)
    touched = set()
    for text in train:
        for g in ngrams(text, N):
            rows = index.get(g)
            if rows:
                touched.update(rows)
    return touched


def timed(function, *args):
    start = time.perf_counter()
    out = function(*args)
    return time.perf_counter() - start, out


BOILERPLATE = "Answer the question below in one short sentence and explain nothing else:"


def near_duplicates(n: int, seed: int = 1, boilerplate: bool = False, thresholds=(0.5, 0.7, 0.8),
                    perms=(64, 128, 256)) -> list[list]:
    """Precision, recall and time of MinHash against exact search; `boilerplate` starts every text with the same
    instruction, as SFT prompts often do, so every pair shares shingles and the exact search goes quadratic."""
    from erroranalysis.datachecks.near_duplicates import exact_pairs, minhash_pairs, precision_recall

    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(VOCAB_SIZE)]
    head = BOILERPLATE + " " if boilerplate else ""
    texts = [head + " ".join(rng.choices(vocab, k=rng.randint(20, 60))) for _ in range(n)]
    for _ in range(n // 50):  # 2% planted: a copy with 1 to 3 words changed
        i, j = rng.sample(range(n), 2)
        tokens = texts[i].split()
        for _ in range(rng.randint(1, 3)):
            tokens[rng.randrange(len(tokens))] = rng.choice(vocab)
        texts[j] = " ".join(tokens)
    rows = []
    for threshold in thresholds:
        t_exact, truth = timed(exact_pairs, texts, threshold)
        for perm in perms:
            t_lsh, found = timed(minhash_pairs, texts, threshold, perm)
            q = precision_recall(found, truth)
            rows.append([threshold, perm, q["true"], q["found"], f"{q['precision']:.3f}", f"{q['recall']:.3f}",
                         f"{t_lsh:.2f}", f"{t_exact:.2f}"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10000,100000,1000000", help="training rows, comma-separated")
    parser.add_argument("--eval-rows", type=int, default=10_000)
    parser.add_argument("--peer-rows", type=int, default=100_000, help="training rows the peers run on")
    parser.add_argument("--near-rows", type=int, default=20_000, help="texts of the MinHash measurement")
    parser.add_argument("--boilerplate-only", action="store_true", help="only the near-duplicate case whose texts "
                        "share an opening instruction")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if int(s) > 0]
    print(f"contamination: {N}-grams, {args.eval_rows:,} eval prompts; {load_average()}", flush=True)
    rows = []
    for n_train in sizes:
        train, evals, planted = make_texts(n_train, args.eval_rows)
        n_words = sum(len(t.split()) for t in train)
        seconds, (found, _) = timed(ours, train, evals)
        assert found == set(planted), "ours missed or added rows"
        rows.append(["ours", f"{n_train:,}", f"{n_words / 1e6:.1f}M", f"{seconds:.1f}", f"{n_train / seconds:,.0f}", ""])
        base = seconds
        if n_train == args.peer_rows:
            for name, peer in (("lm_eval", lm_eval_janitor), ("python_sets", python_sets)):
                try:
                    peer_seconds, peer_found = timed(peer, train, evals)
                except ImportError as exc:
                    rows.append([name, f"{n_train:,}", "", f"not installed ({exc.name})", "", ""])
                    continue
                assert peer_found == set(planted), f"{name} missed or added rows"
                rows.append([name, f"{n_train:,}", f"{n_words / 1e6:.1f}M", f"{peer_seconds:.1f}",
                             f"{n_train / peer_seconds:,.0f}", f"{peer_seconds / base:.1f}x ours"])
        print(table(rows[-3:] if n_train == args.peer_rows else rows[-1:],
                    ["method", "train rows", "train words", "seconds", "train rows/s", "vs ours"]), flush=True)
    print()
    print(table(rows, ["method", "train rows", "train words", "seconds", "train rows/s", "vs ours"]))
    print(f"\nnear duplicates: MinHash LSH (word 3-grams, candidates verified exactly) against exact Jaccard "
          f"search, {args.near_rows:,} texts, 2% planted copies with 1 to 3 words changed; {load_average()}")
    header = ["Jaccard >=", "num_perm", "exact pairs", "found", "precision", "recall", "minhash s", "exact s"]
    if not args.boilerplate_only:
        print(table(near_duplicates(args.near_rows), header), flush=True)
    n_head = args.near_rows // 4
    print(f"\nthe same with one 12-word instruction opening every text ({n_head:,} texts); {load_average()}")
    print(table(near_duplicates(n_head, boilerplate=True, thresholds=(0.8,), perms=(128,)), header))
    print(load_average())


if __name__ == "__main__":
    main()
