"""Above `max_fit`, clustering fits on a sample stratified by confusion pair and assigns the rest."""

import numpy as np
import pandas as pd
import pytest

from erroranalysis.cluster import FailureClustering
from erroranalysis.cluster._sample import quotas, strata_of, stratified_sample


def test_quotas_are_proportional_with_a_floor():
    take = quotas(np.array([9000, 900, 90, 10]), 1000, floor=40)
    assert take.sum() == 1000
    assert take[3] == 10 and take[2] == 40  # a small pair whole, a medium one at the floor
    assert take[0] > take[1] > take[2]
    assert abs(take[0] / take[1] - 10) < 1.5  # the large ones keep their proportion
    assert quotas(np.array([5, 5]), 100, floor=3).tolist() == [5, 5]  # never more than there is


def test_the_sample_is_seeded_and_stratified():
    strata = np.repeat([0, 1, 2], [5000, 500, 50])
    a = stratified_sample(strata, 600, np.random.default_rng(3), floor=40)
    b = stratified_sample(strata, 600, np.random.default_rng(3), floor=40)
    assert np.array_equal(a, b) and len(a) == 600 and len(np.unique(a)) == 600
    assert (np.diff(a) > 0).all()
    assert np.bincount(strata[a]).tolist()[2] == 40  # the floor, above its share (5)


def test_strata_need_both_columns():
    frame = pd.DataFrame({"label": ["a", "a", "b"], "pred": ["b", "c", "a"]})
    assert len(set(strata_of(frame, 3))) == 3
    assert not strata_of(frame[["label"]], 3).any()
    assert not strata_of(None, 3).any()


def planted(seed=0):
    """Failures of three confusion pairs, each around its own direction; one pair is small (150 of 4,150)."""
    rng = np.random.default_rng(seed)
    pairs = [("a", "b", 2000), ("b", "c", 2000), ("c", "a", 150)]
    centres = rng.normal(size=(3, 16)) * 4
    rows, frame = [], []
    for g, (gold, pred, size) in enumerate(pairs):
        rows.append(centres[g] + rng.normal(size=(size, 16)))
        frame += [(gold, pred, g)] * size
    frame = pd.DataFrame(frame, columns=["label", "pred", "group"])
    order = rng.permutation(len(frame))
    return np.vstack(rows).astype(np.float32)[order], frame.iloc[order].reset_index(drop=True)


def test_held_out_failures_join_their_planted_cluster():
    vectors, frame = planted()
    model = FailureClustering(reducer="pca", error_aware=False, max_fit=600, seed=0, parent_similarity=None)
    result = model.fit(vectors, None, frame).result_
    params = result.params
    assert params["fit_sample"] == 600 and params["fit_sample_seed"] == 0
    assert params["fit_sample_strata"] == "label, pred"
    assert "stratified by confusion pair" in result.note
    group, labels = frame["group"].to_numpy(), result.labels
    # each planted pair is one cluster, the small one included (a uniform sample keeps ~22 of its 150 rows,
    # fewer than the minimum cluster size of 32)
    main = {g: np.bincount(labels[(group == g) & (labels >= 0)]).argmax() for g in range(3)}
    assert len(set(main.values())) == 3
    for g in range(3):
        members = group == g
        assert (labels[members] == main[g]).mean() >= 0.97, g
    assert (labels >= 0).mean() >= 0.97  # the rows left out of the fit were assigned too


@pytest.mark.parametrize("max_fit", [100, 1000])
def test_below_max_fit_nothing_is_sampled(max_fit):
    vectors, frame = planted()
    small = frame.groupby("group").head(30).index.to_numpy()
    model = FailureClustering(reducer="pca", error_aware=False, max_fit=max_fit, seed=0, parent_similarity=None)
    result = model.fit(vectors[small], None, frame.iloc[small].reset_index(drop=True)).result_
    assert ("fit_sample" in result.params) == (len(small) > max_fit)
