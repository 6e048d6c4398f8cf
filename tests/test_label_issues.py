"""Label issues by confident learning: planted flips rank high; bad inputs are one-line errors."""

import numpy as np
import pytest

from erroranalysis.core.errors import DataError, ParameterError
from erroranalysis.datachecks.label_issues import COLUMNS, find_label_issues, neighbor_label_probs, precision_at_k

CLASSES = ["business", "sport", "tech"]


def noisy_case(n=600, n_flips=30, seed=0):
    """Probabilities from a decent model of the true labels; given labels with `n_flips` planted flips."""
    rng = np.random.default_rng(seed)
    true = rng.integers(0, 3, n)
    logits = rng.normal(0, 1, (n, 3))
    logits[np.arange(n), true] += 3.0
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    flipped = rng.choice(n, n_flips, replace=False)
    given = true.copy()
    given[flipped] = (true[flipped] + rng.integers(1, 3, n_flips)) % 3
    truth = np.zeros(n, dtype=bool)
    truth[flipped] = True
    return np.array(CLASSES, dtype=object)[given], probs.astype(np.float32), truth, np.array(CLASSES)[true]


def test_planted_flips_rank_high_and_are_flagged():
    given, probs, truth, true = noisy_case()
    found = find_label_issues(given, probs, CLASSES)
    assert list(found.columns) == COLUMNS
    assert len(found) == len(given)
    assert precision_at_k(found["label_issue_score"].to_numpy(), truth, 30) >= 0.8
    flagged = found["label_issue"].to_numpy()
    assert truth[flagged].mean() >= 0.7           # most flags are real flips
    assert flagged[truth].mean() >= 0.7           # most flips are flagged
    # the suggestion for a flagged flip is usually its true label
    assert (found["suggested_label"].to_numpy()[truth] == true[truth]).mean() >= 0.8


def test_score_is_one_minus_probability_of_the_given_label():
    given, probs, _, _ = noisy_case(n=50, n_flips=5)
    found = find_label_issues(given, probs, CLASSES)
    index = {c: i for i, c in enumerate(CLASSES)}
    expected = 1 - probs[np.arange(50), [index[g] for g in given]] / probs.sum(1)
    np.testing.assert_allclose(found["label_issue_score"], expected, atol=1e-6)
    assert found["label_issue_score"].between(0, 1).all()


def test_integer_labels_map_onto_classes():
    given, probs, _, _ = noisy_case(n=60, n_flips=3)
    ids = np.array([str(CLASSES.index(g)) for g in given])
    a = find_label_issues(given, probs, CLASSES)
    b = find_label_issues(ids, probs, CLASSES)
    np.testing.assert_array_equal(a["label_issue_score"], b["label_issue_score"])


def test_a_class_without_examples_and_a_single_class_work():
    given, probs, _, _ = noisy_case(n=100, n_flips=5)
    given = np.where(given == "tech", "business", given)
    assert len(find_label_issues(given, probs, CLASSES)) == 100
    single = find_label_issues(np.array(["sport"] * 10), probs[:10], CLASSES)
    assert not single["label_issue"].any()


@pytest.mark.parametrize("probs, labels, message", [
    (np.ones((3, 2)) / 2, ["sport"] * 3, "does not match 3 classes"),
    (np.ones((2, 3)) / 3, ["sport"] * 3, "2 rows for 3 labels"),
    (np.array([[0.5, np.nan, 0.5]] * 3), ["sport"] * 3, "row 0, class 'sport'"),
    (np.array([[0.5, -0.1, 0.6]] * 3), ["sport"] * 3, "not a finite number >= 0"),
    (np.zeros((3, 3)), ["sport"] * 3, "sum to 0"),
    (np.ones((3, 3)) / 3, ["sport", "weather", "sport"], "label 'weather' is not one of the classes"),
    (np.ones((0, 3)), [], "no examples"),
])
def test_bad_inputs_are_one_line_errors(probs, labels, message):
    with pytest.raises(DataError, match=message) as info:
        find_label_issues(np.array(labels, dtype=object), probs, CLASSES, source="probs.npy")
    assert "\n" not in str(info.value) and str(info.value).startswith("probs.npy")


def test_bad_parameters():
    given, probs, _, _ = noisy_case(n=20, n_flips=2)
    with pytest.raises(ParameterError, match="method='loss' is invalid"):
        find_label_issues(given, probs, CLASSES, method="loss")
    with pytest.raises(ParameterError, match="filter_by="):
        find_label_issues(given, probs, CLASSES, filter_by="x")
    with pytest.raises(DataError, match="at least 2"):
        find_label_issues(given, probs[:, :1], ["sport"])


# -- neighbours' labels ------------------------------------------------------------------------------------------


def weak_model_case(n=900, n_flips=45, seed=1, d=16):
    """Three classes whose vectors sit around their own centres; a weak model (about 70% accurate) that is
    confidently wrong on a third of the examples; `n_flips` given labels flipped. Returns given labels, probs,
    vectors, the flips and the model's own errors (label right, model wrong)."""
    rng = np.random.default_rng(seed)
    true = rng.integers(0, 3, n)
    vectors = (rng.normal(size=(3, d)) * 2)[true] + rng.normal(size=(n, d))
    believed = np.where(rng.random(n) < 0.3, (true + rng.integers(1, 3, n)) % 3, true)
    logits = rng.normal(0, 0.5, (n, 3))
    logits[np.arange(n), believed] += 3.0
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    flips = np.zeros(n, dtype=bool)
    flips[rng.choice(n, n_flips, replace=False)] = True
    given = np.where(flips, (true + rng.integers(1, 3, n)) % 3, true)
    own_errors = ~flips & (believed != true)
    return np.array(CLASSES, dtype=object)[given], probs.astype(np.float32), vectors.astype(np.float32), flips, \
        own_errors


def test_neighbours_find_flips_a_weak_model_misses():
    given, probs, vectors, flips, own_errors = weak_model_case()
    alone = find_label_issues(given, probs, CLASSES)["label_issue_score"].to_numpy()
    both = find_label_issues(given, probs, CLASSES, vectors=vectors)["label_issue_score"].to_numpy()
    k = int(flips.sum())
    assert precision_at_k(both, flips, k) >= precision_at_k(alone, flips, k) + 0.3
    assert precision_at_k(alone, own_errors, k) > 0.4  # the softmax alone ranks the model's own mistakes high
    assert precision_at_k(both, own_errors, k) < 0.2


def test_a_near_duplicate_with_another_label_is_the_strongest_case():
    rng = np.random.default_rng(3)
    true = np.arange(90) % 3
    vectors = ((rng.normal(size=(3, 8)) * 2)[true] + rng.normal(size=(90, 8))).astype(np.float32)
    given = np.array(CLASSES, dtype=object)[true]
    vectors[3] = vectors[0] + 0.001  # a near-copy of row 0 (business), labeled ...
    given[3] = "sport"  # ... as something else
    probs = np.full((90, 3), 1 / 3, dtype=np.float32)  # a model that knows nothing
    scores = find_label_issues(given, probs, CLASSES, vectors=vectors)["label_issue_score"].to_numpy()
    assert np.argsort(-scores)[:2].tolist() == [3, 0]  # the copy among business texts, then its twin


def test_neighbor_label_probs_rules():
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(500, 12)).astype(np.float32)
    ids = rng.integers(0, 3, 500)
    exact = neighbor_label_probs(vectors, ids, 3, k=10)
    np.testing.assert_allclose(exact.sum(1), 1, atol=1e-5)
    # the sampled reference is the exact search when it holds every row, and never counts a row as its own neighbour
    sampled = neighbor_label_probs(vectors, ids, 3, k=10, max_reference=499, chunk_rows=64)
    assert np.abs(sampled - exact).mean() < 0.02
    twins = np.repeat(vectors[:50], 2, axis=0)
    own = np.repeat(np.arange(50) % 3, 2)
    from_twins = neighbor_label_probs(twins, own, 3, k=5, max_reference=99)  # the sampled path
    assert (from_twins.argmax(1) == own).mean() >= 0.97  # the twin, not the row itself, decides
    one = neighbor_label_probs(vectors[:1], np.array([2]), 3)  # no neighbour: the class frequencies
    assert one.tolist() == [[0.0, 0.0, 1.0]]


def test_batched_path_gives_the_same_scores_and_close_flags():
    given, probs, vectors, flips, _ = weak_model_case(n=1200, n_flips=60)
    whole = find_label_issues(given, probs, CLASSES, vectors=vectors)
    batched = find_label_issues(given, probs, CLASSES, vectors=vectors, batch_rows=300, max_reference=500)
    assert np.corrcoef(whole["label_issue_score"], batched["label_issue_score"])[0, 1] > 0.95
    # cleanlab's batched flags are the more cautious: fewer, nearly all among the others, nearly all flips
    a, b = whole["label_issue"].to_numpy(), batched["label_issue"].to_numpy()
    assert 0 < b.sum() <= a.sum() and (a & b).sum() >= 0.9 * b.sum()
    assert flips[b].mean() >= 0.9 and b[flips].mean() >= 0.6


def test_bad_vectors_and_weights():
    given, probs, vectors, _, _ = weak_model_case(n=60, n_flips=3)
    with pytest.raises(DataError, match=r"^vectors: shape \(59, 16\) for 60 examples") as info:
        find_label_issues(given, probs, CLASSES, vectors=vectors[:59])
    assert "\n" not in str(info.value)
    bad = vectors.copy()
    bad[3, 0] = np.nan
    with pytest.raises(DataError, match="^vectors: contain NaN"):
        find_label_issues(given, probs, CLASSES, vectors=bad)
    with pytest.raises(ParameterError, match="^knn_weight="):
        find_label_issues(given, probs, CLASSES, vectors=vectors, knn_weight=1.5)
    with pytest.raises(ParameterError, match="^k="):
        find_label_issues(given, probs, CLASSES, vectors=vectors, k=0)
    # weight 0 is the model alone
    np.testing.assert_allclose(find_label_issues(given, probs, CLASSES, vectors=vectors, knn_weight=0)
                               ["label_issue_score"], find_label_issues(given, probs, CLASSES)["label_issue_score"])
