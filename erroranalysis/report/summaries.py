"""What a run's example table says per cluster, per slice and per confusion: the counts the app's pages show.

Pure functions over DataFrames: `table` is an example table (erroranalysis.stages.example_table: one row per
example with label, pred, correct, cluster_id, cluster_name and the label columns error_type_id, error_type);
`clusters` is clusters.parquet and `slices`, `members` are slices.parquet and slice_members.parquet as
erroranalysis.rundir.readers returns them.
"""

from __future__ import annotations

CLUSTER_SUMMARY_COLUMNS = ["cluster_id", "name", "size", "share", "top_confusion", "labeled", "main_type", "keywords",
                           "summary", "parent_id", "parent"]


def confusion_pairs(rows):
    """Failures of `rows` per (label, pred), most frequent first (ties by label, then pred): a Series."""
    import pandas as pd

    failing = rows.loc[~rows["correct"].to_numpy(bool), ["label", "pred"]]
    if failing.empty:
        return pd.Series([], dtype="int64", index=pd.MultiIndex.from_arrays([[], []], names=["label", "pred"]))
    counts = failing.groupby(["label", "pred"]).size().rename("count").reset_index()
    counts = counts.sort_values(["count", "label", "pred"], ascending=[False, True, True], kind="stable")
    return counts.set_index(["label", "pred"])["count"]


def cluster_summary(table, clusters):
    """One row per cluster, by impact (failures in it, largest first; ties by id): cluster_id, name, size (its
    failures; clusters.parquet's size when none of the table's failures is in it), share (of the run's failures),
    top_confusion, labeled (share of its examples with an error type), main_type (the commonest), keywords (six),
    summary (one sentence), parent_id (-1 for a cluster without a parent) and parent (its parent's name)."""
    import pandas as pd

    # counted on columns, never on filtered copies of the table: the app reruns this after every labeling change
    failed = ~table["correct"].to_numpy(bool)
    cluster = table["cluster_id"].to_numpy()
    member, typed = cluster >= 0, table["error_type_id"].to_numpy() >= 0
    n_fail = max(1, int(failed.sum()))
    fail_count = pd.Series(cluster[member & failed]).value_counts()
    all_count = pd.Series(cluster[member]).value_counts()
    labeled = pd.Series(cluster[member & typed]).value_counts()
    main = table.loc[member & typed, ["cluster_id", "error_type"]].groupby("cluster_id")["error_type"].agg(_commonest)
    rows = []
    for _, c in clusters.iterrows():
        cid = int(c["cluster_id"])
        n_all = int(all_count.get(cid, 0))
        n_f = int(fail_count.get(cid, 0))
        confusions = list(c["top_confusions"])
        rows.append({
            "cluster_id": cid,
            "name": str(c["name"]) or f"cluster {cid}",
            "size": n_f if n_f else int(c["size"]),
            "share": n_f / n_fail,
            "top_confusion": str(confusions[0]).replace("->", "→") if confusions else "",
            "labeled": (int(labeled.get(cid, 0)) / n_all) if n_all else 0.0,
            "main_type": str(main.get(cid, "")),
            "keywords": [str(k) for k in c["keywords"]][:6],
            "summary": str(c["summary"]) if isinstance(c.get("summary"), str) else "",
            "parent_id": int(c["parent_id"]) if pd.notna(c.get("parent_id", None)) else -1,
            "parent": str(c["parent_name"]) if isinstance(c.get("parent_name"), str) else "",
        })
    out = pd.DataFrame(rows, columns=CLUSTER_SUMMARY_COLUMNS)
    return out.sort_values(["size", "cluster_id"], ascending=[False, True]).reset_index(drop=True)


def slice_summary(slices, members, table):
    """One row per slice, in the order of `slices`: its columns (but `features`) plus labeled (share of its failures
    with an error type), main_type (the commonest of their types) and main_cluster (the cluster most of its
    failures are in, by name)."""
    cols = ["example_id", "correct", "error_type_id", "error_type", "cluster_id", "cluster_name"]
    joined = members.merge(table[cols], on="example_id", how="inner")
    failing = joined[~joined["correct"].astype(bool)]
    n_fail = failing.groupby("slice_id").size()
    labeled = failing[failing["error_type_id"] >= 0]
    n_labeled = labeled.groupby("slice_id").size()
    main_type = labeled.groupby("slice_id")["error_type"].agg(_commonest)
    clustered = failing[failing["cluster_id"] >= 0]
    main_cluster = clustered.groupby("slice_id")["cluster_name"].agg(_commonest)
    out = slices.drop(columns=["features"], errors="ignore").copy()
    sid = out["slice_id"]
    out["labeled"] = [int(n_labeled.get(s, 0)) / int(n_fail.get(s, 0)) if n_fail.get(s, 0) else 0.0 for s in sid]
    out["main_type"] = [str(main_type.get(s, "")) for s in sid]
    out["main_cluster"] = [str(main_cluster.get(s, "")) for s in sid]
    return out


def sample_by_cluster(failing, limit: int, per_cluster: int, seed: int = 0):
    """At most `limit` rows of `failing`: up to `per_cluster` of every cluster (a small cluster still shows), the
    rest of the budget shared by cluster size. All of them when there are no more than `limit`."""
    import numpy as np
    import pandas as pd

    if len(failing) <= limit:
        return failing
    groups = [group for _, group in failing.groupby("cluster_id", sort=True)]
    sizes = np.array([len(group) for group in groups])
    floor = np.minimum(sizes, max(1, min(per_cluster, limit // len(groups))))
    spare = max(0, limit - int(floor.sum()))
    extra = np.floor(spare * (sizes - floor) / max(1, int((sizes - floor).sum()))).astype(int)
    keep = np.minimum(sizes, floor + extra)
    return pd.concat([group.sample(int(k), random_state=seed) for group, k in zip(groups, keep)])


def _commonest(values) -> str:
    """The most frequent value (ties: the first seen, as value_counts orders them); "" for none."""
    counts = values.value_counts()
    return counts.index[0] if len(counts) else ""


def why_no_clusters(facts: dict, failing_outputs=None) -> str:
    """Why a finished clustering found no cluster, in words, from the cluster stage's manifest entry `facts`
    (n_failures, note, params, resolved) and, for a generation run, the failing outputs (None otherwise)."""
    n = int(facts.get("n_failures") or 0)
    if n == 0:
        return "no failing examples: nothing to cluster"
    resolved, params = facts.get("resolved") or {}, facts.get("params") or {}
    mcs = resolved.get("min_cluster_size") or params.get("min_cluster_size")
    outputs = None if failing_outputs is None else {str(o) for o in failing_outputs}
    if outputs is not None and len(outputs) == 1 and n > 1:
        shown = next(iter(outputs))
        shown = shown if len(shown) <= 60 else shown[:59] + "…"
        return (f"all {n} failing outputs are identical ({shown!r}): one failure mode, which the failure reasons "
                "name; the prompts around it did not group")
    if mcs and n < mcs:
        return f"only {n} failures, fewer than the minimum cluster size {mcs} (--min-cluster-size)"
    why = f"no group of at least {mcs} similar failures among {n}: every failure was left unclustered"
    tiers = resolved.get("tier_min_cluster_size") or {}
    share = resolved.get("systematic_share")
    if tiers and share is not None:
        systematic = int(round(share * n))
        why += (f" (--error-aware split them into {systematic} systematic and {n - systematic} scattered failures, "
                "clustered apart)")
    hint = f"; try --min-cluster-size {max(2, round(mcs * 0.6))}" if mcs else "; try a smaller --min-cluster-size"
    if tiers:
        hint += " or --no-error-aware"
    note = facts.get("note")
    return why + hint + (f" ({note})" if note else "")
