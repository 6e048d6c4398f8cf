import numpy as np
import pandas as pd
import pytest

from erroranalysis.cluster import (
    ConfusionPairFeature,
    FailureClustering,
    HDBSCANClusterer,
    NoReducer,
    PCAReducer,
    cluster_failures,
    cluster_parents,
    default_min_cluster_size,
    describe_clusters,
    group_scatter,
    knn_cosine,
    layout_2d,
    local_error_rate,
    relabel_by_size,
    take_out_groups,
)
from erroranalysis.core.errors import DataError, ParameterError

LABELS = ["alpha", "beta", "gamma"]


def best_f1(truth: np.ndarray, labels: np.ndarray, group) -> float:
    g = truth == group
    best = 0.0
    for c in set(labels[labels >= 0].tolist()):
        m = labels == c
        inter = (g & m).sum()
        if inter:
            p, r = inter / m.sum(), inter / g.sum()
            best = max(best, 2 * p * r / (p + r))
    return best


def planted(seed: int = 0, n: int = 900, d: int = 24):
    """All examples: 3 classes; 2 planted sub-topics that fail (90%) plus 6% background failures.

    Returns vectors [n, d], failed mask, per-example truth (group id, -1 background failure, -2 correct) and a
    frame of the failures (label, pred).
    """
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(5, d)) * 2.5
    label = np.arange(n) % 3
    topic = label.copy()
    sub = rng.random(n)
    topic[(label == 0) & (sub < 0.2)] = 3  # planted group 0 inside class alpha
    topic[(label == 1) & (sub < 0.2)] = 4  # planted group 1 inside class beta
    vectors = centres[topic] + rng.normal(size=(n, d))
    planted_fail = (topic >= 3) & (rng.random(n) < 0.9)
    background = (topic < 3) & (rng.random(n) < 0.06)
    failed = planted_fail | background
    truth = np.where(planted_fail, topic - 3, np.where(background, -1, -2))
    pred = label.copy()
    pred[planted_fail & (topic == 3)] = 1
    pred[planted_fail & (topic == 4)] = 2
    pred[background] = (label[background] + rng.integers(1, 3, background.sum())) % 3
    frame = pd.DataFrame({"label": np.array(LABELS)[label[failed]], "pred": np.array(LABELS)[pred[failed]]})
    return vectors.astype(np.float32), failed, truth, frame


@pytest.mark.parametrize("reducer", ["none", "pca"])
def test_planted_groups_recovered(reducer):
    vectors, failed, truth, frame = planted()
    result = cluster_failures(vectors, failed, frame, reducer=reducer, seed=0)
    t = truth[failed]
    assert result.method == "hdbscan"
    assert len(result.labels) == failed.sum()
    for group in (0, 1):
        assert best_f1(t, result.labels, group) > 0.85
    assert result.noise_share < 0.1


def test_error_aware_tiers_separate_planted_from_scattered():
    vectors, failed, truth, frame = planted(seed=1)
    result = cluster_failures(vectors, failed, frame, reducer="none", seed=0)
    t = truth[failed]
    assert (result.tier[t >= 0] == "systematic").mean() > 0.8
    assert (result.tier[t == -1] == "scattered").mean() > 0.6
    assert np.nanmean(result.local_error_rate[t >= 0]) > np.nanmean(result.local_error_rate[t == -1])
    assert set(result.cluster_tier.values()) <= {"systematic", "scattered"}
    assert result.params["base_error_rate"] == pytest.approx(failed.mean(), abs=1e-3)
    sizes = result.params["tier_min_cluster_size"]  # the default size scales with each tier
    assert set(sizes) == {"systematic", "scattered"}
    assert sizes["systematic"] == default_min_cluster_size(int((result.tier == "systematic").sum()))
    fixed = cluster_failures(vectors, failed, frame, reducer="none", min_cluster_size=7)
    assert "tier_min_cluster_size" not in fixed.params and fixed.params["min_cluster_size"] == 7


def test_without_context_one_tier():
    vectors, failed, truth, frame = planted()
    result = cluster_failures(vectors[failed], None, frame, reducer="none")
    assert set(result.tier.tolist()) == {"all"}
    assert np.isnan(result.local_error_rate).all()
    off = cluster_failures(vectors, failed, frame, reducer="none", error_aware=False)
    assert set(off.tier.tolist()) == {"all"}


def test_deterministic_given_seed():
    vectors, failed, _, frame = planted()
    a = cluster_failures(vectors, failed, frame, reducer="pca", seed=3)
    b = cluster_failures(vectors, failed, frame, reducer="pca", seed=3)
    assert (a.labels == b.labels).all() and np.allclose(a.membership, b.membership)


def test_clusters_numbered_by_size():
    vectors, failed, _, frame = planted()
    result = cluster_failures(vectors, failed, frame, reducer="none")
    sizes = [int((result.labels == c).sum()) for c in range(result.n_clusters)]
    assert sizes == sorted(sizes, reverse=True)
    assert ((result.membership > 0) == (result.labels >= 0)).all()
    assert ((result.membership >= 0) & (result.membership <= 1)).all()


def test_relabel_by_size():
    labels, mapping = relabel_by_size(np.array([5, 5, -1, 2, 2, 2, 9]))
    assert labels.tolist() == [1, 1, -1, 0, 0, 0, 2]
    assert mapping == {2: 0, 5: 1, 9: 2}


def test_no_failures():
    vectors = np.random.default_rng(0).normal(size=(30, 8)).astype(np.float32)
    result = cluster_failures(vectors, np.zeros(30, dtype=bool))
    assert result.method == "empty" and result.n_clusters == 0 and len(result.labels) == 0
    assert result.noise_share == 0.0


def test_handful_grouped_by_confusion_pair():
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"label": ["a", "a", "b", "a", "b", "c"], "pred": ["b", "b", "a", "b", "c", "a"]})
    result = cluster_failures(rng.normal(size=(6, 8)), None, frame)
    assert result.method == "confusion_pairs"
    assert "grouped by confusion pair" in result.note
    assert result.labels.tolist() == [0, 0, 1, 0, 2, 3]
    assert (result.tier == "confusion_pair").all()


def test_identical_vectors_make_one_cluster():
    vectors = np.tile(np.arange(8, dtype=np.float32), (40, 1))
    result = cluster_failures(vectors, reducer="pca")
    assert result.method == "single" and result.n_clusters == 1 and (result.labels == 0).all()
    assert "same vector" in result.note


def test_noise_kept_or_assigned():
    rng = np.random.default_rng(0)
    blobs = np.vstack([rng.normal(c, 0.3, size=(40, 6)) for c in (0, 6)])
    scattered = rng.uniform(-3, 9, size=(12, 6))
    vectors = np.vstack([blobs, scattered]).astype(np.float32)
    kept = cluster_failures(vectors, reducer="none", min_cluster_size=10, assign_noise=None, error_aware=False)
    assigned = cluster_failures(vectors, reducer="none", min_cluster_size=10, assign_noise=0.0, error_aware=False)
    assert kept.noise_share > 0
    assert assigned.noise_share <= kept.noise_share
    assert assigned.reassigned.sum() == (kept.labels < 0).sum() - (assigned.labels < 0).sum()
    moved = assigned.reassigned
    assert (assigned.membership[moved] <= 0.5).all()


def test_fit_on_sample_assigns_rest():
    vectors, failed, truth, frame = planted(n=1500)
    n_fail = int(failed.sum())
    result = cluster_failures(vectors, failed, frame, reducer="pca", max_fit=100, seed=0)
    assert result.params["fit_sample"] == 100
    assert "sample of 100" in result.note
    assert len(result.labels) == n_fail and result.coordinates.shape[0] == n_fail
    t = truth[failed]
    for group in (0, 1):
        assert best_f1(t, result.labels, group) > 0.8


def test_confusion_pair_feature_columns_consistent():
    frame = pd.DataFrame({"label": ["a", "a", "b"], "pred": ["b", "c", "a"]})
    block = ConfusionPairFeature(0.5).transform(frame)
    assert block.shape == (3, 3)
    assert np.allclose(np.linalg.norm(block[0] - block[1]), 1.0)
    vectors, failed, truth, frame = planted()
    result = cluster_failures(vectors, failed, frame, reducer="pca", features=[ConfusionPairFeature(0.5)],
                              max_fit=150)
    assert len(result.labels) == failed.sum()


def test_feature_needs_frame():
    vectors, failed, _, _ = planted()
    with pytest.raises(DataError, match="confusion_pair"):
        cluster_failures(vectors, failed, None, reducer="pca", features=[ConfusionPairFeature(0.5)])


def test_injected_stages():
    class HalfSplit:
        def fit(self, Y):
            labels = (Y[:, 0] > np.median(Y[:, 0])).astype(np.int64)
            return labels, np.ones(len(Y), np.float32)

    vectors, failed, _, frame = planted()
    result = FailureClustering(reducer=NoReducer(), clusterer=HalfSplit(), error_aware=False).fit(
        vectors, failed, frame).result_
    assert result.n_clusters == 2 and result.noise_share == 0


def test_knn_cosine_excludes_self():
    base = np.eye(4, dtype=np.float32) + 0.01
    idx = knn_cosine(base, base, 1, exclude=np.arange(4))
    assert (idx[:, 0] != np.arange(4)).all()
    idx = knn_cosine(base, base, 1)
    assert (idx[:, 0] == np.arange(4)).all()


def test_local_error_rate_flags_dense_failures():
    rng = np.random.default_rng(0)
    dense = rng.normal(0, 0.1, size=(30, 4)) + 5  # a region where every example fails
    spread = rng.normal(0, 1, size=(300, 4))  # failures sprinkled at 5%
    vectors = np.vstack([dense, spread])
    failed = np.concatenate([np.ones(30, bool), rng.random(300) < 0.05])
    rate, systematic, base = local_error_rate(vectors, failed, k=10)
    assert base == pytest.approx(failed.mean())
    assert systematic[:30].all()
    assert rate[:30].mean() > 0.8 and rate[30:].mean() < 0.5


def test_default_min_cluster_size():
    assert default_min_cluster_size(10) == 5
    assert default_min_cluster_size(1000) == 16
    assert default_min_cluster_size(100_000) == 158


def test_layout_pca_and_none():
    vectors = np.random.default_rng(0).normal(size=(50, 8))
    xy = layout_2d(vectors, method="pca")
    assert xy.shape == (50, 2) and np.isfinite(xy).all()
    assert np.isnan(layout_2d(vectors, method="none")).all()
    assert layout_2d(np.zeros((0, 8)), method="pca").shape == (0, 2)


def test_pca_reducer_pads_when_few_points():
    Y = PCAReducer(10).fit_transform(np.random.default_rng(0).normal(size=(4, 8)))
    assert Y.shape == (4, 10)


@pytest.mark.parametrize("params, name", [
    ({"min_cluster_size": 1}, "min_cluster_size"),
    ({"min_cluster_size": 2.5}, "min_cluster_size"),
    ({"reducer": "tsne"}, "reducer"),
    ({"n_components": 0}, "n_components"),
    ({"n_neighbors": 1}, "n_neighbors"),
    ({"min_samples": 0}, "min_samples"),
    ({"local_k": 1}, "local_k"),
    ({"alpha": 0}, "alpha"),
    ({"alpha": 1.5}, "alpha"),
    ({"assign_noise": 1.5}, "assign_noise"),
    ({"assign_noise": -0.1}, "assign_noise"),
    ({"min_failures": 1}, "min_failures"),
    ({"max_fit": 10}, "max_fit"),
    ({"group_purity": 1.5}, "group_purity"),
    ({"parent_similarity": 2}, "parent_similarity"),
    ({"parent_similarity": True}, "parent_similarity"),
    ({"group_purity": True}, "group_purity"),
    ({"seed": -1}, "seed"),
])
def test_invalid_parameters(params, name):
    with pytest.raises(ParameterError, match=f"^{name}="):
        FailureClustering(**params).validate()


def test_invalid_stage_parameters():
    with pytest.raises(ParameterError, match="^pair_weight="):
        ConfusionPairFeature(-1)
    with pytest.raises(ParameterError, match="^min_cluster_size="):
        HDBSCANClusterer(1)
    with pytest.raises(ParameterError, match="^layout="):
        layout_2d(np.zeros((3, 2)), method="tsne")


def test_bad_vectors():
    with pytest.raises(DataError, match="NaN"):
        cluster_failures(np.full((30, 4), np.nan))
    with pytest.raises(DataError, match="flags"):
        cluster_failures(np.zeros((30, 4)), np.zeros(10, bool))


@pytest.mark.slow
def test_umap_recovers_planted_groups():
    vectors, failed, truth, frame = planted(seed=2)
    result = cluster_failures(vectors, failed, frame, reducer="umap", seed=0)
    t = truth[failed]
    for group in (0, 1):
        assert best_f1(t, result.labels, group) > 0.85
    assert result.coordinates.shape == (failed.sum(), 5)


@pytest.mark.slow
def test_umap_layout_and_sampled_fit():
    vectors, failed, truth, frame = planted(n=1200, seed=3)
    xy = layout_2d(vectors, method="umap", max_fit=500)
    assert xy.shape == (1200, 2) and np.isfinite(xy).all()
    result = cluster_failures(vectors, failed, frame, reducer="umap", max_fit=120, seed=0)
    assert len(result.labels) == failed.sum() and result.params["fit_sample"] == 120


# -- slice groups ------------------------------------------------------------------------------------------------


def concept_case(seed: int = 0, n: int = 900, d: int = 24):
    """planted() plus a concept: every 25th example (all classes alike) "mentions" it, with vectors no different
    from their class's, and fails 90% of the time (a minority among each class's scattered failures). Returns
    vectors, failed, truth (2 = concept), the failures' frame and the slice groups a slice finder would give
    (0 = the concept, 1 = planted group 0's keyword slice)."""
    vectors, failed, truth, frame = planted(seed, n, d)
    rng = np.random.default_rng(seed + 100)
    concept = (truth < 0) & (np.arange(n) % 25 == 7)
    newly = concept & ~failed & (rng.random(n) < 0.9)
    truth = np.where(concept & (failed | newly), 2, truth)
    failed = failed | newly
    label = np.arange(n) % 3
    pred = (label + 1) % 3
    frame = pd.DataFrame({"label": np.array(LABELS)[label[failed]], "pred": np.array(LABELS)[pred[failed]]})
    t = truth[failed]
    groups = np.where(t == 2, 0, np.where(t == 0, 1, -1))
    return vectors, failed, truth, frame, groups


@pytest.mark.parametrize("reducer", ["none", "pca"])
def test_scattered_slice_taken_out_exactly(reducer):
    vectors, failed, truth, frame, groups = concept_case()
    t = truth[failed]
    plain = cluster_failures(vectors, failed, frame, reducer=reducer, seed=0)
    assert best_f1(t, plain.labels, 2) < 0.6  # the embedding scatters the concept over the topics
    result = cluster_failures(vectors, failed, frame, reducer=reducer, seed=0, groups=groups)
    assert list(result.cluster_group.values()) == [0]  # the concept, not the sub-topic the embedding found
    (c, _), = result.cluster_group.items()
    assert np.array_equal(np.flatnonzero(result.labels == c), np.flatnonzero(t == 2))
    assert result.cluster_tier[c] == "slice" and (result.tier[t == 2] == "slice").all()
    assert (result.membership[t == 2] == 1).all()
    for group in (0, 1):  # the topic groups are as good as without slices
        assert best_f1(t, result.labels, group) >= best_f1(t, plain.labels, group) - 0.05 > 0.8
    assert result.params["groups_taken_out"] == 1
    unclustered = result.labels < 0  # including what was left of a cluster the slice emptied
    assert not result.reassigned[unclustered].any() and (result.membership[unclustered] == 0).all()


def test_slice_groups_off():
    vectors, failed, truth, frame, groups = concept_case()
    off = cluster_failures(vectors, failed, frame, reducer="none", group_purity=0, groups=groups)
    plain = cluster_failures(vectors, failed, frame, reducer="none")
    assert off.cluster_group == {} and (off.labels == plain.labels).all()


def test_take_out_groups_rules():
    labels = np.array([0] * 10 + [1] * 10 + [2] * 10 + [3] * 4)
    # group 5: 2 failures in each of clusters 0, 1, 2 and 3: scattered, a minority everywhere -> taken out
    groups = np.full(len(labels), -1)
    groups[[0, 1, 10, 11, 20, 21, 30, 31]] = 5
    new, taken = take_out_groups(labels, groups, min_size=3)
    assert taken == {4: 5} and np.array_equal(np.flatnonzero(new == 4), [0, 1, 10, 11, 20, 21, 30, 31])
    assert (new[32:] == -1).all()  # what was left of cluster 3 (2 failures) is below min_size: dissolved
    assert (new[2:10] == 0).all()
    # most of the group inside one broader cluster, a minority there -> taken out too
    groups = np.full(len(labels), -1)
    groups[[0, 1, 2, 3, 4, 10, 20]] = 0
    assert group_scatter(labels, np.array([0, 1, 2, 3, 4, 10, 20]))[0] > 0.5
    assert take_out_groups(labels, groups, min_size=3)[1] == {4: 0}
    # most of a cluster -> left alone
    groups[[5, 6, 7, 8]] = 0
    assert take_out_groups(labels, groups, min_size=3)[1] == {}
    # split over clusters it fills (sub-types) -> left alone
    assert group_scatter(labels, np.arange(20))[1] == 1.0
    groups = np.where(labels <= 2, 0, -1)
    assert take_out_groups(labels, groups, min_size=3)[1] == {}
    # too small
    groups = np.full(len(labels), -1)
    groups[[0, 10]] = 0
    assert take_out_groups(labels, groups, min_size=3)[1] == {}
    # unclustered failures count as scattered
    labels = np.full(10, -1)
    assert group_scatter(labels, np.arange(5)) == (0.0, 0.0)
    assert take_out_groups(labels, np.r_[np.zeros(5, int), -np.ones(5, int)], min_size=3)[1] == {0: 0}


def test_groups_must_match_failures():
    vectors, failed, truth, frame = planted()
    with pytest.raises(DataError, match="^groups: "):
        cluster_failures(vectors, failed, frame, reducer="none", groups=np.zeros(3, int))
    with pytest.raises(DataError, match="^groups: "):
        cluster_failures(vectors, failed, frame, reducer="none", groups=np.zeros(failed.sum()))


# -- a concept misread both ways ---------------------------------------------------------------------------------


def two_way_case(seed: int = 2, n: int = 1500, d: int = 24):
    """Five classes whose vectors sit around their own centres; 6% of the texts (all classes) mention "weather";
    those of class a are read as b and those of b as a (90%); 10% of the others fail at random. The embedding
    puts the concept's a and b texts apart; the slice search finds `"weather" and label == "a"` and
    `... == "b"`. Returns texts, vectors, gold, pred and the concept's failures."""
    from erroranalysis.slices import extract_features, find_slices  # noqa: F401  (used by the callers)

    rng = np.random.default_rng(seed)
    names = np.array(["a", "b", "c", "d", "e"])
    label = rng.integers(0, 5, n)
    vectors = (rng.normal(size=(5, d)) * 3)[label] + rng.normal(size=(n, d))
    concept = rng.random(n) < 0.06
    filler = [f"w{i}" for i in range(120)]
    texts = []
    for i in range(n):
        words = list(rng.choice(filler, rng.integers(5, 25)))
        if concept[i]:
            words.insert(int(rng.integers(0, len(words) + 1)), "weather")
        texts.append(" ".join(words))
    pred = label.copy()
    two_way = concept & (label <= 1) & (rng.random(n) < 0.9)
    pred[two_way] = 1 - label[two_way]
    background = ~(concept & (label <= 1)) & (rng.random(n) < 0.1)
    pred[background] = (label[background] + rng.integers(1, 5, background.sum())) % 5
    return texts, vectors.astype(np.float32), names[label], names[pred], two_way


def test_concept_misread_both_ways_is_one_cluster():
    from erroranalysis import slices

    texts, vectors, gold, pred, two_way = two_way_case()
    correct = gold == pred
    found = slices.find_slices(slices.extract_features(texts, labels=gold.tolist(), min_support=10), correct,
                               example_ids=np.arange(len(texts)))
    described = set(found.slices["description"])
    assert {'text contains "weather" and label == "a"', 'text contains "weather" and label == "b"'} <= described
    failed = ~correct
    rows = np.flatnonzero(failed)
    frame = pd.DataFrame({"example_id": rows.astype(str), "text": np.array(texts, dtype=object)[failed],
                          "label": gold[failed], "pred": pred[failed]})
    t = two_way[failed]

    def clusters_of_concept(join: bool):
        best = slices.slice_groups(found.slices, found.members, example_ids=rows, join_labels=join)
        groups = np.array([best.get(i, -1) for i in rows])
        result = cluster_failures(vectors, failed, frame, reducer="pca", groups=groups)
        held = [c for c in np.unique(result.labels[t]) if c >= 0 and (result.labels[t] == c).sum() >= 5]
        return result, held, best

    _, apart, _ = clusters_of_concept(join=False)
    assert len(apart) == 2  # one per direction: what the join is for
    result, (c,), best = clusters_of_concept(join=True)
    assert best_f1(t.astype(int), result.labels, 1) > 0.9
    (g,) = {best[i] for i in rows[t]}
    assert slices.group_titles(found.slices)[g] == 'text contains "weather" (label "a" or "b")'
    table = describe_clusters(frame, result.labels, vectors=vectors[failed]).set_index("cluster_id")
    row = table.loc[c]
    assert set(row["top_confusions"][:2]) == {"a -> b", "b -> a"}  # the two directions, as a facet
    assert row["name"].split(":")[0] in ("a <-> b", "b <-> a")
    assert "read as each other" in row["summary"]


# -- parent error types ------------------------------------------------------------------------------------------


def nested_case(seed: int = 0, per: int = 60, d: int = 32):
    """Failures around 6 sub-type centres, three near each of two coarse centres (cosine ~0.85 within a coarse
    type, ~0 across)."""
    rng = np.random.default_rng(seed)
    coarse = rng.normal(size=(2, d))
    coarse /= np.linalg.norm(coarse, axis=1, keepdims=True)
    fine = np.repeat(coarse, 3, axis=0) * 2.5 + rng.normal(size=(6, d)) / np.sqrt(d)
    truth = np.repeat(np.arange(6), per)
    vectors = fine[truth] + rng.normal(size=(len(truth), d)) * 0.08
    return vectors.astype(np.float32), truth


def test_parents_recover_planted_nesting():
    vectors, truth = nested_case()
    result = cluster_failures(vectors, reducer="none", seed=0)
    assert result.n_clusters == 6 and all(best_f1(truth, result.labels, g) > 0.95 for g in range(6))
    parent = result.parents()
    assert len(set(result.cluster_parent.values())) == 2
    for coarse in (0, 1):  # each coarse type is one parent over its three sub-types
        mine = parent[np.isin(truth, [3 * coarse, 3 * coarse + 1, 3 * coarse + 2])]
        assert (mine == mine[0]).all() and mine[0] >= 0
    assert parent[truth < 3][0] != parent[truth >= 3][0]
    assert result.params["n_parents"] == 2
    frame = pd.DataFrame({"example_id": [f"e{i}" for i in range(len(truth))], "text": ["x"] * len(truth),
                          "label": np.where(truth < 3, "a", "b"), "pred": np.where(truth < 3, "b", "a")})
    table = describe_clusters(frame, result.labels, vectors=vectors, parents=result.cluster_parent)
    assert table["parent_id"].notna().all() and table.groupby("parent_id")["cluster_id"].count().tolist() == [3, 3]
    assert set(table["parent_name"]) == {"a -> b", "b -> a"}


def test_parents_rules():
    vectors, truth = nested_case()
    assert cluster_parents(vectors, truth, min_similarity=1.0) == {}  # nothing is that alike
    assert set(cluster_parents(vectors, truth, min_similarity=-1.0).values()) == {0}  # one parent over all
    assert cluster_parents(vectors, np.where(truth == 0, 0, -1)) == {}  # one cluster: no parent
    off = cluster_failures(vectors, reducer="none", parent_similarity=None)
    assert off.cluster_parent == {} and (off.parents() == -1).all()
    # parent ids by size: the coarse type with more failures is parent 0
    keep = (truth >= 3) | (np.arange(len(truth)) % 2 == 0)
    parents = cluster_parents(vectors[keep], truth[keep])
    assert parents[3] == parents[4] == parents[5] == 0 and parents[0] == 1
