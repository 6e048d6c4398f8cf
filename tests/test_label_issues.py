"""Label issues by confident learning: planted flips rank high; bad inputs are one-line errors."""

import numpy as np
import pytest

from erroranalysis.datachecks.label_issues import COLUMNS, find_label_issues, precision_at_k
from erroranalysis.errors import DataError, ParameterError

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
