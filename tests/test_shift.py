"""Distribution shift: planted shifts are found and described; same-distribution sets raise nothing."""

import numpy as np
import pytest

from erroranalysis.core.errors import DataError, ParameterError
from erroranalysis.datachecks.shift import class_balance, moved_words, shift_report, words

VOCAB = [f"word{i}" for i in range(300)]


def corpus(rng, n, *, labels=("a", "b"), p=(0.5, 0.5), length=(10, 20), extra=None, extra_rate=0.0):
    texts, ys = [], []
    for _ in range(n):
        k = int(rng.integers(*length))
        tokens = list(rng.choice(VOCAB, k))
        if extra and rng.random() < extra_rate:
            tokens += list(rng.choice(extra, 3))
        texts.append(" ".join(tokens))
        ys.append(str(rng.choice(labels, p=p)))
    return texts, ys


def embed_counts(texts, vocab=VOCAB + ["crypto", "bitcoin", "blockchain"]):
    index = {w: i for i, w in enumerate(vocab)}
    out = np.zeros((len(texts), len(vocab)), dtype=np.float32)
    for row, text in enumerate(texts):
        for w in words(text):
            if w in index:
                out[row, index[w]] += 1
    return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


def test_no_shift_gives_no_findings():
    rng = np.random.default_rng(0)
    train, train_y = corpus(rng, 600)
    evals, eval_y = corpus(rng, 300)
    report = shift_report(train, evals, train_labels=train_y, eval_labels=eval_y, embed=embed_counts)
    assert report["class_balance"]["p_value"] > 0.01
    assert 0.3 < report["domain"]["auc"] < 0.65
    assert report["findings"] == []
    assert report["vocabulary"]["oov_token_rate"] < 0.01


def test_planted_shifts_are_found_and_explained():
    rng = np.random.default_rng(1)
    train, train_y = corpus(rng, 600, p=(0.8, 0.2))
    evals, eval_y = corpus(rng, 300, labels=("a", "b", "c"), p=(0.3, 0.5, 0.2), length=(25, 40),
                           extra=["crypto", "bitcoin", "blockchain"], extra_rate=0.7)
    report = shift_report(train, evals, train_labels=train_y, eval_labels=eval_y, embed=embed_counts)
    checks = {f["check"]: f for f in report["findings"]}
    assert {"label_unseen_in_train", "class_balance_shift", "length_shift", "words_moved", "domain_shift"} <= set(checks)
    assert "'c'" in checks["label_unseen_in_train"]["message"]
    assert report["class_balance"]["only_in_eval"] == ["c"]
    assert report["class_balance"]["p_value"] < 1e-6 and report["class_balance"]["cramers_v"] > 0.3
    assert "longer" in checks["length_shift"]["message"]
    assert report["lengths"]["mean_ratio"] > 1.5
    top = [w["word"] for w in report["words"]["more_in_eval"][:3]]
    assert set(top) == {"crypto", "bitcoin", "blockchain"}
    assert report["domain"]["auc"] > 0.9 and checks["domain_shift"]["severity"] == "error"
    # the eval examples least like train carry the new words
    least = [evals[r["eval_index"]] for r in report["domain"]["least_like_train"][:5]]
    assert all(any(w in t for w in ("crypto", "bitcoin", "blockchain")) for t in least)
    assert [f["severity"] for f in report["findings"]] == sorted(
        [f["severity"] for f in report["findings"]], key=["error", "warning", "info"].index)


def test_class_balance_counts_and_test():
    out = class_balance(["a"] * 80 + ["b"] * 20, ["a"] * 50 + ["b"] * 50)
    rows = {r["label"]: r for r in out["labels"]}
    assert rows["a"]["train"] == 80 and rows["b"]["eval_share"] == 0.5
    assert abs(rows["b"]["difference"] - 0.3) < 1e-12
    assert out["dof"] == 1 and out["p_value"] < 1e-4
    single = class_balance(["a"], ["a"])
    assert single["p_value"] is None


def test_moved_words_use_the_prior_and_min_count():
    train = [["the", "cat"]] * 50
    evals = [["the", "dog"]] * 50 + [["rare"]]
    moved = moved_words(train, evals, n=5, min_count=2)
    assert moved["more_in_eval"][0]["word"] == "dog"
    assert moved["more_in_train"][0]["word"] == "cat"
    assert all(w["word"] != "rare" for w in moved["more_in_eval"])
    assert all(abs(w["word"] == "the" and w["z"]) < 1 for w in moved["more_in_eval"] + moved["more_in_train"])


def test_precomputed_embeddings_and_no_classifier():
    rng = np.random.default_rng(3)
    train, _ = corpus(rng, 50)
    evals, _ = corpus(rng, 40)
    report = shift_report(train, evals, train_embeddings=rng.normal(size=(50, 8)),
                          eval_embeddings=rng.normal(size=(40, 8)) + 3)
    assert report["domain"]["auc"] > 0.95 and "class_balance" not in report
    assert "domain" not in shift_report(train, evals, domain_classifier=False)


def test_bad_inputs():
    with pytest.raises(DataError, match="both need examples"):
        shift_report([], ["a"], domain_classifier=False)
    with pytest.raises(ParameterError, match="folds=1 is invalid"):
        shift_report(["a"], ["b"], folds=1)
    with pytest.raises(DataError, match="train embeddings: shape"):
        shift_report(["a b", "c"], ["d", "e"], train_embeddings=np.ones((3, 2)), eval_embeddings=np.ones((2, 2)))
    assert shift_report(["a", "b"], ["c"])["domain"]["auc"] is None  # too few for cross-validation
    with pytest.raises(DataError, match="embed both with the same model"):
        shift_report(["a", "b"], ["c", "d"], train_embeddings=np.ones((2, 2)), eval_embeddings=np.ones((2, 3)))
