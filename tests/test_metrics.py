import json

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import accuracy_score, confusion_matrix, precision_recall_fscore_support

from erroranalysis.core.errors import DataError, ParameterError, UserError
from erroranalysis.metrics import bucket_values, calibration, compute_metrics, word_counts

LABELS = ["ant", "bee", "cat", "dog", "eel"]


@pytest.fixture
def arrays():
    """Random predictions where 'dog' is never predicted and 'eel' never occurs as gold label."""
    rng = np.random.default_rng(7)
    n = 400
    y_true = rng.choice(["ant", "bee", "cat", "dog"], n)
    y_pred = np.where(rng.random(n) < 0.6, y_true, rng.choice(["ant", "bee", "cat", "eel"], n))
    y_pred = np.where(y_pred == "dog", "cat", y_pred)
    probs = rng.dirichlet(np.ones(len(LABELS)), n)
    return y_true, y_pred, probs


def test_overall_matches_sklearn(arrays):
    y_true, y_pred, _ = arrays
    overall = compute_metrics(y_true, y_pred, LABELS, n_resamples=50)["overall"]
    assert overall["n"] == len(y_true)
    assert overall["accuracy"] == pytest.approx(accuracy_score(y_true, y_pred))
    assert overall["n_failures"] == int((y_true != y_pred).sum())
    for average in ("macro", "micro", "weighted"):
        p, r, f, _ = precision_recall_fscore_support(y_true, y_pred, labels=LABELS, average=average,
                                                     zero_division=0)
        assert overall[f"{average}_precision"] == pytest.approx(p)
        assert overall[f"{average}_recall"] == pytest.approx(r)
        assert overall[f"{average}_f1"] == pytest.approx(f)


def test_per_class_matches_sklearn(arrays):
    y_true, y_pred, _ = arrays
    per_class = compute_metrics(y_true, y_pred, LABELS, n_resamples=50)["per_class"]
    p, r, f, s = precision_recall_fscore_support(y_true, y_pred, labels=LABELS, zero_division=0)
    assert [row["label"] for row in per_class] == LABELS
    assert [row["precision"] for row in per_class] == pytest.approx(p)
    assert [row["recall"] for row in per_class] == pytest.approx(r)
    assert [row["f1"] for row in per_class] == pytest.approx(f)
    assert [row["support"] for row in per_class] == list(s)
    assert per_class[3]["predicted"] == 0 and per_class[4]["support"] == 0


def test_confusion_matches_sklearn(arrays):
    y_true, y_pred, _ = arrays
    confusion = compute_metrics(y_true, y_pred, LABELS, n_resamples=0)["confusion"]
    assert confusion["labels"] == LABELS
    assert confusion["matrix"] == confusion_matrix(y_true, y_pred, labels=LABELS).tolist()
    expected = np.nan_to_num(confusion_matrix(y_true, y_pred, labels=LABELS, normalize="true"))
    np.testing.assert_allclose(confusion["normalized"], expected)


def test_top_confusions_are_largest_off_diagonal_cells(arrays):
    y_true, y_pred, _ = arrays
    result = compute_metrics(y_true, y_pred, LABELS, n_resamples=0)
    cm = np.array(result["confusion"]["matrix"])
    tops = result["top_confusions"]
    counts = [row["count"] for row in tops]
    assert counts == sorted(counts, reverse=True)
    for row in tops:
        assert row["label"] != row["pred"]
        assert cm[LABELS.index(row["label"]), LABELS.index(row["pred"])] == row["count"]
        assert row["share_of_failures"] == pytest.approx(row["count"] / result["overall"]["n_failures"])
    off = cm - np.diag(np.diag(cm))
    assert counts[0] == off.max()


def test_brier_matches_one_hot(arrays):
    y_true, y_pred, probs = arrays
    result = compute_metrics(y_true, y_pred, LABELS, probs, n_resamples=0)
    one_hot = (np.array(LABELS)[None, :] == y_true[:, None]).astype(float)
    expected = np.mean(np.sum((probs - one_hot) ** 2, axis=1))
    assert result["overall"]["brier"] == pytest.approx(expected)
    assert result["calibration"]["brier"] == pytest.approx(expected)


def naive_ece(y_true, probs, n_bins):
    edges = np.linspace(0, 1, n_bins + 1)
    conf = probs.max(axis=1)
    correct = np.array([LABELS[j] for j in probs.argmax(axis=1)]) == y_true
    ece, counts = 0.0, []
    for i in range(n_bins):
        inside = [(c > edges[i] or (i == 0 and c == 0)) and c <= edges[i + 1] for c in conf]
        inside = np.array(inside)
        counts.append(int(inside.sum()))
        if inside.any():
            ece += inside.mean() * abs(correct[inside].mean() - conf[inside].mean())
    return ece, counts


@pytest.mark.parametrize("n_bins", [15, 4])
def test_ece_matches_naive_loop(arrays, n_bins):
    y_true, y_pred, probs = arrays
    probs = probs ** 3 / (probs ** 3).sum(axis=1, keepdims=True)  # spread confidences over more bins
    result = compute_metrics(y_true, y_pred, LABELS, probs, n_bins=n_bins, n_resamples=0)
    expected, counts = naive_ece(y_true, probs, n_bins)
    assert result["overall"]["ece"] == pytest.approx(expected)
    assert [b["count"] for b in result["calibration"]["bins"]] == counts
    assert result["calibration"]["n_bins"] == n_bins


def test_calibration_bin_edges_and_empty_bins():
    probs = np.array([[1.0, 0.0], [0.6, 0.4], [0.5, 0.5]])
    cal = calibration(np.array([0, 1, 0]), probs, n_bins=2)
    assert [(b["lower"], b["upper"], b["count"]) for b in cal["bins"]] == [(0.0, 0.5, 1), (0.5, 1.0, 2)]
    empty = calibration(np.array([0]), np.array([[0.9, 0.1]]), n_bins=2)["bins"][0]
    assert empty["count"] == 0 and empty["confidence"] is None and empty["accuracy"] is None


def test_bootstrap_contains_point_and_is_seeded(arrays):
    y_true, y_pred, _ = arrays
    first = compute_metrics(y_true, y_pred, LABELS, seed=3)
    again = compute_metrics(y_true, y_pred, LABELS, seed=3)
    other = compute_metrics(y_true, y_pred, LABELS, seed=4)
    lo, hi = first["overall"]["accuracy_ci"]
    assert lo <= first["overall"]["accuracy"] <= hi and lo < hi
    for row in first["per_class"]:
        assert row["f1_ci"][0] <= row["f1"] <= row["f1_ci"][1]
    assert first == again
    assert first["overall"]["accuracy_ci"] != other["overall"]["accuracy_ci"]
    assert first["bootstrap"] == {"n_resamples": 1000, "seed": 3, "level": 0.95}


def test_no_resamples_gives_no_intervals(arrays):
    y_true, y_pred, _ = arrays
    result = compute_metrics(y_true, y_pred, LABELS, n_resamples=0)
    assert result["overall"]["accuracy_ci"] is None
    assert all(row["f1_ci"] is None for row in result["per_class"])


def test_slices_on_hand_example():
    y_true = ["a", "a", "b", "b", "a", "b"]
    y_pred = ["a", "b", "b", "b", "a", "a"]
    metadata = pd.DataFrame({"source": ["web", "web", "web", "news", "news", None]})
    texts = ["one", "one two", "one two three", "x " * 10, "x " * 20, "x " * 30]
    by_metadata = compute_metrics(y_true, y_pred, ["a", "b"], metadata=metadata, texts=texts,
                                  n_resamples=0)["by_metadata"]
    web, news, missing = by_metadata["source"]
    assert (web["value"], web["n"], web["accuracy"]) == ("web", 3, pytest.approx(2 / 3))
    assert web["error_rate"] == pytest.approx(1 / 3)
    assert web["macro_f1"] == pytest.approx((2 / 3 + 2 / 3) / 2)  # a: P=1 R=.5; b: P=.5 R=1
    assert (news["value"], news["n"], news["accuracy"], news["macro_f1"]) == ("news", 2, 1.0, 1.0)
    assert (missing["value"], missing["n"], missing["accuracy"], missing["macro_f1"]) == ("(missing)", 1, 0.0, 0.0)
    lengths = by_metadata["text_length"]
    assert sum(row["n"] for row in lengths) == 6
    assert lengths[0]["value"].startswith("[1,") and lengths[-1]["value"].endswith("30]")


def test_categorical_slices_keep_top_values_and_other():
    values = pd.Series(["a"] * 5 + ["b"] * 4 + ["c"] * 2 + ["d"])
    codes, names = bucket_values(values, max_values=2)
    assert names == ["a", "b", "(other)"]
    assert codes.tolist() == [0] * 5 + [1] * 4 + [2] * 3


def test_numeric_slices_are_quantile_buckets():
    codes, names = bucket_values(pd.Series(np.arange(100, dtype=float)))
    assert len(names) == 5 and names[0] == "[0, 19.8]" and names[-1] == "(79.2, 99]"
    assert np.bincount(codes).tolist() == [20] * 5
    codes, names = bucket_values(pd.Series([3, 1, 1, 2]))  # few values: each its own slice, in order
    assert names == ["1", "2", "3"] and codes.tolist() == [2, 0, 0, 1]


def test_word_counts():
    assert word_counts(["a  b\tc", "", None, "\u3000x y "]).tolist() == [3, 0, 0, 2]


def test_result_is_strict_json(arrays):
    y_true, y_pred, probs = arrays
    metadata = pd.DataFrame({"n": np.arange(len(y_true)), "kind": ["k"] * len(y_true)})
    result = compute_metrics(y_true, y_pred, LABELS, probs, metadata, [""] * len(y_true), n_resamples=20)
    assert json.loads(json.dumps(result, allow_nan=False)) == result
    assert set(result) == {"overall", "per_class", "confusion", "top_confusions", "calibration", "by_metadata",
                           "bootstrap"}
    assert "calibration" not in compute_metrics(y_true, y_pred, LABELS, n_resamples=0)


def test_integer_labels_compare_as_strings():
    result = compute_metrics(np.array([0, 1, 1]), [0, 1, 0], ["0", "1"], n_resamples=0)
    assert result["overall"]["accuracy"] == pytest.approx(2 / 3)


@pytest.mark.parametrize("kwargs, match", [
    ({"y_pred": ["a", "b"]}, "y_pred has 2 rows but y_true has 3"),
    ({"y_true": ["a", "b", "zebra"]}, "y_true has labels not in labels: 'zebra'"),
    ({"y_pred": ["a", "x", "y"]}, "y_pred has labels not in labels: 'x', 'y'"),
    ({"y_true": ["a", None, "b"]}, "y_true has a missing label at index 1"),
    ({"y_true": [], "y_pred": []}, "y_true is empty"),
    ({"probs": np.ones((3, 3))}, r"probs has shape \(3, 3\); expected \(3, 2\)"),
    ({"probs": np.ones(3)}, r"probs has shape \(3,\)"),
    ({"probs": np.array([[0.5, 0.5], [np.nan, 1], [1, 0]])}, "probs row 1 has NaN"),
    ({"metadata": pd.DataFrame({"m": [1, 2]})}, "metadata has 2 rows"),
    ({"texts": ["x"]}, "texts has 1 rows"),
    ({"labels": []}, "labels=.* is invalid"),
    ({"labels": ["a", "b", "a"]}, "labels has duplicates: 'a'"),
])
def test_bad_input_raises_one_line_user_error(kwargs, match):
    args = {"y_true": ["a", "b", "a"], "y_pred": ["a", "a", "b"], "labels": ["a", "b"]} | kwargs
    with pytest.raises(DataError, match=match) as info:
        compute_metrics(**args)
    assert isinstance(info.value, UserError) and "\n" not in str(info.value)


@pytest.mark.parametrize("name, value", [("n_bins", 0), ("n_resamples", -1), ("seed", -2),
                                         ("max_metadata_values", 0), ("n_bins", 2.5), ("n_resamples", True)])
def test_bad_parameters_raise_parameter_error(name, value):
    with pytest.raises(ParameterError, match=f"{name}={value!r} is invalid"):
        compute_metrics(["a"], ["a"], ["a"], **{name: value})


def test_bootstrap_in_chunks_matches_intervals(arrays, monkeypatch):
    from erroranalysis.metrics import classification as metrics

    y_true, y_pred, _ = arrays
    whole = compute_metrics(y_true, y_pred, LABELS, n_resamples=200)
    monkeypatch.setattr(metrics, "BOOTSTRAP_CELLS", 3 * len(LABELS) ** 2)  # 3 resamples at a time
    chunked = compute_metrics(y_true, y_pred, LABELS, n_resamples=200)
    assert chunked == compute_metrics(y_true, y_pred, LABELS, n_resamples=200)
    lo, hi = chunked["overall"]["accuracy_ci"]
    assert lo <= chunked["overall"]["accuracy"] <= hi
    assert chunked["overall"]["accuracy_ci"] == pytest.approx(whole["overall"]["accuracy_ci"], abs=0.03)
