"""Above `max_fit`, clustering fits on a sample stratified by confusion pair and assigns the rest."""

from collections import Counter

import numpy as np
import pandas as pd
import pytest

from erroranalysis.cluster import FailureClustering
from erroranalysis.cluster._sample import quotas, sample_keys, smallest, strata_of, stratified_sample


def test_quotas_are_proportional_with_a_floor():
    take = quotas(np.array([9000, 900, 90, 10]), 1000, floor=40)
    assert take.sum() == 1000
    assert take[3] == 10 and take[2] == 40  # a small pair whole, a medium one at the floor
    assert take[0] > take[1] > take[2]
    assert abs(take[0] / take[1] - 10) < 1.5  # the large ones keep their proportion
    assert quotas(np.array([5, 5]), 100, floor=3).tolist() == [5, 5]  # never more than there is


def test_the_sample_is_seeded_and_stratified():
    strata = np.repeat([0, 1, 2], [5000, 500, 50])
    ids = [f"x{i}" for i in range(len(strata))]
    a = stratified_sample(strata, ids, 600, 3, floor=40)
    b = stratified_sample(strata, ids, 600, 3, floor=40)
    assert np.array_equal(a, b) and len(a) == 600 and len(np.unique(a)) == 600
    assert (np.diff(a) > 0).all()
    assert np.bincount(strata[a]).tolist()[2] == 40  # the floor, above its share (5)
    assert not np.array_equal(a, stratified_sample(strata, ids, 600, 4, floor=40))  # the seed matters


def test_the_sample_follows_the_ids_not_their_order():
    """The rule a block-by-block sample relies on: the same ids give the same sample in any row order, and the
    smallest keys of each part of any split hold the smallest keys overall."""
    rng = np.random.default_rng(0)
    strata = rng.integers(0, 4, 3000)
    ids = np.array([f"id-{i}" for i in range(3000)], dtype=object)
    picked = set(ids[stratified_sample(strata, ids, 300, 11, floor=20)])
    order = rng.permutation(3000)
    assert set(ids[order][stratified_sample(strata[order], ids[order], 300, 11, floor=20)]) == picked
    keys = sample_keys(ids, 11)
    cuts = np.sort(rng.choice(np.arange(1, 3000), 6, replace=False))
    parts = [p[smallest(keys[p], ids[p], 50)] for p in np.split(np.arange(3000), cuts)]
    union = np.concatenate(parts)
    assert set(ids[union[smallest(keys[union], ids[union], 50)]]) == set(ids[smallest(keys, ids, 50)])
    # against an independent computation: sort by (key, id) in Python
    expected = sorted(zip(keys.tolist(), ids.tolist()))[:50]
    assert set(ids[smallest(keys, ids, 50)]) == {i for _, i in expected}


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


def test_the_manifest_records_the_sample(tmp_path):
    import json

    from fake_runs import inferred_run

    from erroranalysis.stages.cluster import cluster_run

    vectors, frame = planted()
    rows = frame.groupby("group").head(150).index.to_numpy()
    part = frame.iloc[rows].reset_index(drop=True)
    table = pd.DataFrame({"example_id": [f"e{i}" for i in range(len(part))], "text": [f"text {i}" for i in range(len(part))],
                          "label": part["label"], "pred": part["pred"]})
    run = inferred_run(tmp_path / "run", table, labels=["a", "b", "c"], hidden=vectors[rows])
    summary = cluster_run(run.path, embedder="hidden", reducer="pca", layout="none", error_aware=False, max_fit=200,
                          seed=7)
    resolved = json.loads((run.path / "manifest.json").read_text())["stages"]["cluster"]["resolved"]
    assert resolved["fit_sample"] == 200 and resolved["fit_sample_seed"] == 7
    assert resolved["fit_sample_strata"] == "label, pred"
    assert "stratified by confusion pair" in summary["note"]


def _blocks_of(frame, cuts):
    """(Arrow table, Block) pairs of `frame` cut at `cuts`, as engines.blocks.plan would hand them out."""
    import pyarrow as pa

    from erroranalysis.engines.blocks import Block

    bounds = [0, *cuts, len(frame)]
    return [(pa.Table.from_pandas(frame.iloc[a:b].reset_index(drop=True), preserve_index=False),
             Block("predictions.parquet", a, b - a, a, (0,), a)) for a, b in zip(bounds, bounds[1:])]


@pytest.mark.parametrize("split", range(3))
def test_block_passes_merge_to_the_whole(split):
    """Passes 1 and 2 of the cluster stage under ray over a random cut into blocks: the strata counts and the
    sample equal the in-process ones (`strata_of`, `stratified_sample`) on the whole table."""

    from erroranalysis.cluster import blockwise

    rng = np.random.default_rng(split)
    n = 2000
    gold = rng.choice(["a", "b", "c"], n)
    pred = np.where(rng.random(n) < 0.4, rng.choice(["a", "b", "c"], n), gold)
    frame = pd.DataFrame({"example_id": [f"e{i}" for i in rng.permutation(n)], "text": "t", "label": gold,
                          "pred": pred, "correct": gold == pred})
    parts = _blocks_of(frame, np.sort(rng.choice(np.arange(1, n), 5, replace=False)).tolist())
    pairs = sum((blockwise.block_strata(t, b)["pairs"] for t, b in parts), Counter())
    failures = frame[~frame["correct"]].reset_index(drop=True)
    assert pairs == Counter((failures["label"] + "\x1f" + failures["pred"]).tolist())
    keys = sorted(pairs)
    take = quotas(np.array([pairs[k] for k in keys]), 300, 20)
    wanted = {**dict(zip(keys, take.tolist())), blockwise.CORRECT: 100}
    merged = None
    for t, b in parts:
        part = blockwise.block_sample(t, b, quotas=wanted, seed=5)
        merged = blockwise.merge_sample([p for p in (merged, part) if p is not None], wanted)
    got = merged[~merged["correct"]]["example_id"].tolist()
    rows = stratified_sample(strata_of(failures, len(failures)), failures["example_id"], 300, 5, floor=20)
    assert got == failures["example_id"].iloc[rows].tolist()
    correct = frame[frame["correct"]]
    ids = correct["example_id"].to_numpy()
    assert sorted(merged[merged["correct"]]["example_id"]) == sorted(ids[smallest(sample_keys(ids, 5), ids, 100)])


def test_sizes_and_parents_from_block_sums_equal_the_whole():
    """Numbering clusters by size and their parents from per-block counts and direction sums, as the ray driver
    merges them, equal `relabel_by_size` and `cluster_parents` over all rows."""
    from erroranalysis.cluster import cluster_parents, parents_of, relabel_by_size, size_order
    from erroranalysis.cluster._neighbors import unit_rows

    rng = np.random.default_rng(1)
    centres = rng.normal(size=(6, 8))
    centres[3:] = centres[:3] + 0.3 * rng.normal(size=(3, 8))  # three pairs of similar clusters
    labels = rng.integers(-1, 6, 3000)
    vectors = centres[np.maximum(labels, 0)] + 0.2 * rng.normal(size=(3000, 8))
    sizes, first, sums = Counter(), {}, {}
    unit = unit_rows(vectors)
    for part in np.split(np.arange(3000), [700, 1500, 2900]):
        for c in np.unique(labels[part][labels[part] >= 0]):
            rows = part[labels[part] == c]
            sizes[int(c)] += len(rows)
            first[int(c)] = min(first.get(int(c), rows[0]), int(rows[0]))
            sums[int(c)] = sums.get(int(c), 0) + unit[rows].sum(axis=0, dtype=np.float64)
    new, mapping = relabel_by_size(labels)
    assert size_order(dict(sizes), first) == mapping
    whole = cluster_parents(vectors, new, min_similarity=0.6)
    assert whole and parents_of({mapping[c]: s for c, s in sums.items()}, {mapping[c]: n for c, n in sizes.items()},
                                min_similarity=0.6) == whole
