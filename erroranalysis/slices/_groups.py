"""Strong slices as groups for the clustering: each failure's best strong slice (`slice_groups`), slices that differ
only by a label conjunct joined into one group, and what each group is called (`group_titles`).
"""

from __future__ import annotations

import pandas as pd


def slice_groups(slices: pd.DataFrame, members: pd.DataFrame, *, example_ids=None, min_lift: float = 1.0,
                 max_p_value: float = 0.05, label_only: bool = False, join_labels: bool = True) -> dict:
    """Map each example in a strong slice to the best such slice: {example_id: slice_id}.

    A slice is strong when its error rate is at least (1 + min_lift) times the base rate and its corrected p-value
    is <= max_p_value; slices rank by score (slice_id 0 is best), so an example in several strong slices goes to
    the best. example_ids: restrict to these examples (the failures, for clustering). Slices defined by the true
    label alone (`label == "sport"`) are left out unless `label_only`: the per-class metrics already show them,
    and grouping a class's failures together would hide the error types inside it. With `join_labels`, strong
    slices that differ only in their `label == ...` conjunct (`"weather" and label == "a"`, `"weather" and label ==
    "b"`, `"weather"`) are one group, under the id of the one with the fewest label conjuncts (then the best): one
    concept misread in two directions is one error type whose confusions show both (`group_titles` names it).
    Feed the result to `clustering.FailureClustering.fit(groups=...)` to group a slice's failures together.
    """
    strong = _strong(slices, min_lift, max_p_value, label_only)
    if strong is None or members is None or not len(members):
        return {}
    rank = pd.Series(strong["score"].to_numpy(), index=strong["slice_id"].to_numpy())
    m = members[members["slice_id"].isin(rank.index)].copy()
    if example_ids is not None:
        m = m[m["example_id"].isin(set(example_ids))]
    if not len(m):
        return {}
    m["_score"] = m["slice_id"].map(rank)
    m = m.sort_values(["_score", "slice_id"], ascending=[False, True], kind="stable")
    m = m.drop_duplicates("example_id", keep="first")
    if join_labels:
        m["slice_id"] = m["slice_id"].map(_label_joins(strong))
    return dict(zip(m["example_id"].tolist(), m["slice_id"].astype(int).tolist()))


def group_titles(slices: pd.DataFrame, *, min_lift: float = 1.0, max_p_value: float = 0.05,
                 label_only: bool = False) -> dict[int, str]:
    """{slice_id: what its group of `slice_groups` (same parameters, `join_labels`) is}: the slice's description,
    or, for a group joined over labels without a label-free slice, the shared part and the labels
    (`text contains "weather" (label "a" or "b")`)."""
    titles = dict(zip(slices["slice_id"].astype(int), slices["description"].astype(str))) if slices is not None \
        and len(slices) else {}
    strong = _strong(slices, min_lift, max_p_value, label_only)
    if strong is None:
        return titles
    joins = _label_joins(strong)
    by_id = strong.set_index("slice_id")
    for rep in set(joins.values()):
        joined = [s for s, r in joins.items() if r == rep]
        labels = sorted({str(f)[len("label="):] for s in joined for f in by_id.loc[s, "features"]
                         if str(f).startswith("label=")})
        features = list(by_id.loc[rep, "features"])
        parts = str(by_id.loc[rep, "description"]).split(" and ")
        if len(joined) < 2 or len(parts) != len(features) or not any(str(f).startswith("label=") for f in features):
            continue
        shared = [d for d, f in zip(parts, features) if not str(f).startswith("label=")]
        titles[int(rep)] = " and ".join(shared) + " (label " + " or ".join(f'"{x}"' for x in labels) + ")"
    return titles


def _strong(slices, min_lift, max_p_value, label_only):
    """The strong slices (`slice_groups`), or None when there are none."""
    if slices is None or not len(slices):
        return None
    strong = slices[(slices["lift"] >= min_lift) & (slices["p_value"] <= max_p_value)]
    if not label_only and "features" in strong.columns:
        strong = strong[[not all(str(f).startswith("label=") for f in fs) for fs in strong["features"]]]
    return strong if len(strong) else None


def _label_joins(strong: pd.DataFrame) -> dict[int, int]:
    """{slice_id: the id its group goes by}: slices with the same conjuncts once `label=` ones are set aside share
    the id of the one with the fewest label conjuncts, then the best ranked."""
    if "features" not in strong.columns:
        return {int(s): int(s) for s in strong["slice_id"]}
    keys: dict[tuple, list[tuple[int, int]]] = {}
    for sid, features in zip(strong["slice_id"].astype(int), strong["features"]):
        rest = tuple(sorted(str(f) for f in features if not str(f).startswith("label=")))
        keys.setdefault(rest, []).append((len(features) - len(rest), sid))
    return {sid: min(group)[1] for group in keys.values() for _, sid in group}
