"""Features of a list-valued metadata column (tags, sources): one feature per value, "tags contains x".

The values of one row are not exclusive, so each value is its own group: "tags contains x and tags contains y" is a
conjunction the search may find, where the buckets of a one-value column never conjoin.
"""

from __future__ import annotations

import numpy as np

from erroranalysis.sources import cells


def list_features(values, name: str, min_support: int, add, messages: list[str]) -> None:
    """Call `add(rows, key, description, group, kind)` for each value held by at least `min_support` rows (and not
    by all), and for the rows holding none; say so in `messages` when no value makes a feature."""
    rows, items = cells.explode(values)
    codes, uniques = items.factorize(use_na_sentinel=True)
    counts = np.bincount(codes[codes >= 0], minlength=len(uniques))
    useful = (counts >= min_support) & (counts < len(values))
    for i in np.argsort(-counts, kind="stable"):
        if useful[i]:
            key = f"meta:{name}={uniques[i]}"
            add(rows[codes == i], key, f'{name} contains "{uniques[i]}"', key, "metadata")
    empty = rows[codes < 0]
    if len(empty) >= min_support:
        add(empty, f"meta:{name}=<none>", f"{name} is empty", f"meta:{name}=<none>", "metadata")
    if not useful.any():
        why = "every row holds the same values" if len(values) and counts.max(initial=0) == len(values) else \
            f"no value occurs in at least {min_support} examples"
        messages.append(f"metadata column {name!r} skipped: {why}.")
