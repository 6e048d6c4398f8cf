"""Exact and near duplicates, label conflicts, train/eval leakage, and the block-wise neighbour search."""

import hashlib
import tracemalloc

import numpy as np
import pytest

from erroranalysis.core.errors import DataError, ParameterError
from erroranalysis.datachecks.duplicates import (
    duplicate_summary,
    find_duplicates,
    find_leakage,
    near_duplicate_pairs,
    normalize_rows,
    normalize_text,
    text_keys,
    top_k_neighbors,
)


def bow_embed(texts, dim=256):
    """A cheap deterministic embedder: sum of per-word random vectors (one changed word in 20 keeps cos ~0.95)."""
    out = np.zeros((len(texts), dim), dtype=np.float32)
    for row, text in enumerate(texts):
        for word in normalize_text(text).split():
            seed = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "little")
            out[row] += np.random.default_rng(seed).normal(size=dim)
    return out


def sentence(rng, n=20):
    return " ".join(f"w{i}" for i in rng.integers(0, 5000, n))


def test_normalize_text():
    assert normalize_text("  Hello,   WORLD!\n") == "hello world"
    assert normalize_text("don't-stop_now") == "don t stop now"
    assert normalize_text(None) == ""
    assert normalize_text("Café — olé") == "café olé"
    keys = text_keys(["A b.", "a  B", "a c"])
    assert keys[0] == keys[1] != keys[2]


@pytest.mark.parametrize("block_size", [5, 7, 64, 4096])
def test_block_wise_search_equals_the_full_matrix(block_size):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 16))
    idx, sims = top_k_neighbors(x, k=4, block_size=block_size)
    xn = normalize_rows(x)
    full = xn @ xn.T
    np.fill_diagonal(full, -np.inf)
    expected = np.argsort(-full, axis=1, kind="stable")[:, :4]
    np.testing.assert_allclose(sims, np.take_along_axis(full, expected, 1), atol=1e-5)
    assert (idx == expected).mean() > 0.99  # ties aside
    q = rng.normal(size=(40, 16))
    qi, qs = top_k_neighbors(q, x, k=2, block_size=block_size)
    cross = normalize_rows(q) @ xn.T
    np.testing.assert_allclose(qs, np.sort(cross, 1)[:, ::-1][:, :2], atol=1e-5)


def test_min_similarity_and_missing_neighbours():
    x = np.array([[1, 0], [1, 0.01], [0, 1]], dtype=np.float32)
    idx, sims = top_k_neighbors(x, k=3, min_similarity=0.9)
    assert idx[0].tolist() == [1, -1, -1] and idx[2].tolist() == [-1, -1, -1]
    assert np.isneginf(sims[2]).all()
    pairs = near_duplicate_pairs(x, threshold=0.9)
    assert pairs[["i", "j"]].values.tolist() == [[0, 1]]


def test_memory_stays_bounded_by_the_block_not_the_square():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(20_000, 32)).astype(np.float32)
    tracemalloc.start()
    near_duplicate_pairs(x, threshold=0.9, k=5, block_size=1024)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 0.05 * 20_000 ** 2 * 4  # the full similarity matrix would be 1.6 GB; peak is tens of MB


def test_exact_near_groups_and_conflicts():
    rng = np.random.default_rng(1)
    base = [sentence(rng) for _ in range(40)]
    texts = list(base)
    labels = ["a"] * 40
    texts += [base[0].upper() + "!!", base[1] + "."]          # 40, 41: exact copies of 0 and 1
    labels += ["a", "b"]                                     # 41 conflicts with 1
    words = base[2].split()
    texts.append(" ".join(words[:-1] + ["changed"]))         # 42: near copy of 2
    labels.append("a")
    dups = find_duplicates(texts, labels, embed=bow_embed, threshold=0.9)
    group = dups["duplicate_group"].to_numpy()
    assert group[0] == group[40] >= 0 and group[1] == group[41] >= 0 and group[2] == group[42] >= 0
    assert len({group[0], group[1], group[2]}) == 3
    assert (group[3:40] == -1).all()
    assert sorted(set(group[group >= 0])) == [0, 1, 2]          # ids follow each group's first row
    kind = dups["duplicate_kind"].to_numpy()
    assert kind[0] == kind[40] == "exact" and kind[2] == kind[42] == "near" and kind[5] == ""
    conflict = dups["duplicate_conflict"].to_numpy()
    assert conflict[1] and conflict[41] and not conflict[0] and not conflict[2]
    summary = duplicate_summary(dups, [f"id{i}" for i in range(len(texts))], labels)
    assert summary["n_groups"] == 3 and summary["n_exact_groups"] == 2 and summary["n_near_groups"] == 1
    assert summary["n_redundant"] == 3 and summary["n_conflict_groups"] == 1
    assert summary["groups"][0]["conflict"] and summary["groups"][0]["example_ids"] == ["id1", "id41"]
    assert summary["groups"][0]["labels"] == ["a", "b"]


def test_exact_only_and_embeddings_given():
    texts = ["x y", "X, y!", "z"]
    dups = find_duplicates(texts, near=False)
    assert dups["duplicate_group"].tolist() == [0, 0, -1]
    vectors = np.array([[1, 0], [1, 0], [0.99, 0.1]])
    assert find_duplicates(texts, embeddings=vectors, threshold=0.95)["duplicate_group"].tolist() == [0, 0, 0]
    assert find_duplicates([], near=True)["duplicate_group"].tolist() == []


def test_chains_form_one_group():
    vectors = np.array([[1, 0, 0], [0.96, 0.28, 0], [0.84, 0.54, 0], [0, 0, 1]])  # a~b, b~c, a !~ c
    dups = find_duplicates(["a", "b", "c", "d"], embeddings=vectors, threshold=0.95)
    assert dups["duplicate_group"].tolist() == [0, 0, 0, -1]


def test_leakage_exact_near_and_label_differences():
    rng = np.random.default_rng(2)
    train = [sentence(rng) for _ in range(50)]
    train_labels = ["a"] * 25 + ["b"] * 25
    fresh = [sentence(rng) for _ in range(5)]
    near = " ".join(train[30].split()[:-1] + ["other"])
    evals = fresh + [train[3].title() + "?", near]
    leak = find_leakage(evals, train, eval_labels=["a"] * 5 + ["a", "a"], train_labels=train_labels,
                        embed=bow_embed, threshold=0.9)
    assert leak["in_train"].tolist() == [False] * 5 + [True, True]
    assert leak["train_kind"].tolist()[5:] == ["exact", "near"]
    assert leak["train_index"].tolist() == [-1] * 5 + [3, 30]
    assert leak["train_similarity"].iat[5] == 1.0 and 0.9 <= leak["train_similarity"].iat[6] < 1.0
    assert np.isnan(leak["train_similarity"].iat[0])
    assert leak["train_label_differs"].tolist() == [False] * 6 + [True]
    exact_only = find_leakage(evals, train, near=False)
    assert exact_only["in_train"].sum() == 1


def test_bad_inputs():
    with pytest.raises(ParameterError, match="threshold=1.5 is invalid"):
        find_duplicates(["a"], threshold=1.5)
    with pytest.raises(DataError, match="2 labels for 3 texts"):
        find_duplicates(["a", "b", "c"], ["x", "y"], near=False)
    with pytest.raises(DataError, match="one vector per text"):
        find_duplicates(["a", "b"], embeddings=np.ones((3, 2)))
    with pytest.raises(DataError, match="NaN"):
        find_duplicates(["a", "b"], embeddings=np.array([[1, np.nan], [1, 0]]))
    with pytest.raises(DataError, match="embed both with the same model"):
        top_k_neighbors(np.ones((2, 3)), np.ones((2, 4)))
    with pytest.raises(DataError, match="returned shape"):
        find_duplicates(["a", "b"], embed=lambda texts: np.ones((1, 2)))


@pytest.mark.slow
def test_default_minilm_finds_paraphrased_copies(tmp_path, monkeypatch):
    monkeypatch.setenv("ERRORANALYSIS_CACHE_DIR", str(tmp_path))
    texts = ["The central bank raised interest rates by half a point on Tuesday.",
             "On Tuesday the central bank raised interest rates by half a point.",
             "Manchester United won the cup final after extra time.",
             "A new smartphone with a folding screen goes on sale next month."]
    dups = find_duplicates(texts, ["business", "business", "sport", "tech"], threshold=0.9)
    assert dups["duplicate_group"].tolist() == [0, 0, -1, -1]


def planted(n: int, dim: int = 48, seed: int = 0):
    """Topic clusters with 2% of rows replaced by perturbed copies of others (cosine ~0.97)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(50, dim))
    x = centres[rng.integers(0, 50, n)] + rng.normal(size=(n, dim))
    copies = rng.choice(n, n // 50, replace=False)
    x[copies] = x[rng.integers(0, n, len(copies))] + 0.15 * rng.normal(size=(len(copies), dim))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def test_approximate_search_finds_the_exact_pairs():
    """Above EXACT_MAX rows the inverted-file index answers; on planted near duplicates it finds what every-pair
    search finds (the benchmark measures the same at 100k rows)."""
    from erroranalysis.datachecks.duplicates import near_duplicate_pairs

    x = planted(6000)
    exact = near_duplicate_pairs(x, threshold=0.9, exact=True)
    approx = near_duplicate_pairs(x, threshold=0.9, exact=False)
    pairs = lambda f: set(zip(f["i"].tolist(), f["j"].tolist()))
    assert len(exact) >= 100
    assert len(pairs(exact) & pairs(approx)) >= 0.99 * len(exact)
    assert pairs(approx) <= pairs(exact)  # nothing below the threshold is reported
    np.testing.assert_allclose(approx.set_index(["i", "j"])["similarity"].sort_index(),
                               exact.set_index(["i", "j"]).loc[approx.set_index(["i", "j"]).index,
                                                               "similarity"].sort_index(), atol=1e-5)


def test_approximate_search_against_another_set_and_the_default_switch(monkeypatch):
    from erroranalysis.datachecks import duplicates

    x = planted(3000, seed=1)
    queries, index = x[:400], x[400:]
    i_exact, s_exact = duplicates.top_k_neighbors(queries, index, k=3, exact=True)
    i_apx, s_apx = duplicates.top_k_neighbors(queries, index, k=3, exact=False)
    close = s_exact[:, 0] >= 0.9
    assert close.sum() >= 5
    np.testing.assert_array_equal(i_apx[close, 0], i_exact[close, 0])
    calls = []
    monkeypatch.setattr(duplicates, "_approximate", lambda *a, **k: calls.append(len(a[0])) or (i_apx, s_apx))
    monkeypatch.setattr(duplicates, "EXACT_MAX", 1000)
    duplicates.top_k_neighbors(queries, index, k=3)
    assert calls == [400]
    monkeypatch.setattr(duplicates, "EXACT_MAX", 10_000)
    duplicates.top_k_neighbors(queries, index, k=3)
    assert calls == [400]  # small enough: exact
