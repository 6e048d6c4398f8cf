"""The cluster stage's work per block of rows (`--engine ray`): the driver holds the fit sample, never all rows.

Pure functions of one block (an Arrow table of predictions or of assignment shards) that
`erroranalysis.engines.blocks.map_blocks` runs in this process or on Ray workers; the driver merges their small
results. The rules are those of the in-process fit, in one place each: the sample (`_sample`), placing a failure
left out of the fit (`_assigned.place`), numbering clusters by size (`_groups.size_order`), parents
(`_hierarchy.parents_of`).

1. `block_strata`: failures per (gold, pred) pair and correct examples: the quotas.
2. `block_sample`: per pair its quota of smallest seeded keys (and of the correct examples), with their rows;
   `merge_sample` keeps the smallest overall: the same sample whatever the blocks.
3. `place_block`: the block's failures outside the sample embedded and placed against the fitted sample
   (`Placement`, sent once), its assignments shard written, per-cluster counts, first rows and direction sums
   returned.
4. `renumber_block`: the shard's cluster ids renumbered by the sizes summed over all blocks.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from erroranalysis.cluster._assigned import Assigned, near_mean, place
from erroranalysis.cluster._modes import ModeRule, categories, mode_of, place_by_mode
from erroranalysis.cluster._neighbors import unit_rows
from erroranalysis.cluster._sample import sample_keys, smallest
from erroranalysis.core import shards
from erroranalysis.core.errors import DataError, RunError

CORRECT = None  # the stratum of the correct examples in a sample's quotas


def rows_of(table, block) -> Any:
    """The block's rows as pandas, typed as `rundir.readers.read_units` types them (ids and texts as strings,
    `correct` as booleans)."""
    import pandas as pd

    frame = table.to_pandas()
    where = f"{block.file} (rows {block.start}..{block.stop - 1})"
    if frame["example_id"].isna().any():
        raise RunError(f"{where}, column 'example_id': missing ids; every example needs one.")
    if frame["correct"].isna().any():
        raise RunError(f"{where}, column 'correct': {int(frame['correct'].isna().sum())} missing values; run the "
                       "stage that writes predictions again.")
    frame["example_id"] = frame["example_id"].astype(str)
    frame["correct"] = frame["correct"].astype(bool)
    if "text" in frame.columns:
        frame["text"] = frame["text"].fillna("").astype(str)
    if "label" in frame.columns:
        frame["label"] = frame["label"].astype(str)
    if "pred" in frame.columns:
        frame["pred"] = frame["pred"].fillna("").astype(str)
    frame.index = pd.RangeIndex(block.start, block.stop)  # row positions in the artifact, as in process
    return frame


def _pairs(frame, by_mode: bool = False) -> np.ndarray:
    """Each row's stratum key: its (label, pred) pair, or `by_mode` its failure mode (`_modes.mode_of`)."""
    if by_mode:
        return np.array([mode_of(categories(r)) for r in frame["failure_reason"].astype(str)], dtype=object)
    if not {"label", "pred"} <= set(frame.columns):
        return np.full(len(frame), "", dtype=object)
    return (frame["label"].astype(str) + "\x1f" + frame["pred"].astype(str)).to_numpy(dtype=object)


def block_strata(table, block, *, by_mode: bool = False) -> dict:
    """Pass 1: {"pairs": Counter of failures per stratum key (pair, or `by_mode` failure mode), "correct": correct
    examples, "rows": rows}."""
    frame = rows_of(table, block)
    failed = ~frame["correct"].to_numpy()
    keys = _pairs(frame[failed], by_mode)
    return {"pairs": Counter(keys.tolist()), "correct": int((~failed).sum()), "rows": len(frame)}


def block_sample(table, block, *, quotas: dict, seed: int, by_mode: bool = False) -> Any:
    """Pass 2: the block's rows with the smallest seeded keys, `quotas[stratum]` per stratum of failures and
    `quotas[CORRECT]` of the correct examples; with `_row` (position in the artifact), `_key` and `_stratum`."""
    frame = rows_of(table, block)
    failed = ~frame["correct"].to_numpy()
    strata = np.full(len(frame), CORRECT, dtype=object)
    strata[failed] = _pairs(frame[failed], by_mode)
    ids = frame["example_id"].to_numpy(dtype=object)
    keys = sample_keys(ids, seed)
    keep = []
    for stratum, k in quotas.items():
        rows = np.flatnonzero(~failed if stratum is CORRECT else failed & (strata == stratum))
        keep.append(rows[smallest(keys[rows], ids[rows], int(k))])
    rows = np.sort(np.concatenate(keep)) if keep else np.zeros(0, np.int64)
    return frame.iloc[rows].assign(_row=block.start + rows, _key=keys[rows],
                                   _stratum=strata[rows]).reset_index(drop=True)


def merge_sample(parts, quotas: dict):
    """The rows of `parts` (`block_sample` frames) with the smallest keys, `quotas` per stratum, in row order:
    the sample of the whole artifact. Merging as parts arrive keeps the driver at twice the sample at most."""
    import pandas as pd

    frame = pd.concat(list(parts), ignore_index=True)
    if not len(frame):
        return frame
    keep = []
    strata = frame["_stratum"].to_numpy(dtype=object)
    ids = frame["example_id"].to_numpy(dtype=object)
    keys = frame["_key"].to_numpy()
    for stratum, k in quotas.items():
        rows = np.flatnonzero(pd.isna(strata) if stratum is CORRECT else strata == stratum)
        keep.append(rows[smallest(keys[rows], ids[rows], int(k))])
    return frame.iloc[np.concatenate(keep)].sort_values("_row").reset_index(drop=True)


@dataclass
class Placement:
    """What the workers need to place the failures outside the fit sample, sent once (bounded by `max_fit`):
    the fitted failures (ids, vectors, fit result before numbering by size, local error rate, 2-D position), the
    reference distance, the context rows' 2-D positions, the embedder, and the shard folder. `vectors` None: each
    worker reads them once from `vectors_file` (.npy), so that the driver never holds them."""

    ids: np.ndarray
    vectors: np.ndarray | None
    fitted: Assigned
    rate: np.ndarray
    xy: np.ndarray
    d90: float
    context_xy: dict
    embedder: Any
    folder: str
    vectors_file: str = ""
    column: str = "text"  # what is embedded: a generation run's failure modes embed the output
    modes: ModeRule | None = None  # a fit by failure mode (`_modes.place_by_mode`), else `_assigned.place`
    _index: dict = field(default_factory=dict, repr=False)

    def fitted_vectors(self) -> np.ndarray:
        if self.vectors is None:
            self.vectors = np.asarray(shards.load_npy(self.vectors_file))  # a file, or an object (a run on S3)
        return self.vectors

    def index(self) -> dict:
        if not self._index:
            self._index.update({i: n for n, i in enumerate(self.ids.tolist())})
        return self._index


def place_block(table, block, *, placement: Placement) -> dict:
    """Pass 3: the block's assignments (fitted failures as fitted, the others placed, correct examples
    unclustered), written as its shard; per raw cluster id its size, first row and sum of unit vectors."""
    frame = rows_of(table, block)
    n = len(frame)
    failed = ~frame["correct"].to_numpy()
    index = placement.index()
    pos = np.array([index.get(i, -1) for i in frame["example_id"].tolist()], dtype=np.int64)
    fit_here, rest = np.flatnonzero(failed & (pos >= 0)), np.flatnonzero(failed & (pos < 0))
    out = _unclustered(frame, failed)
    fitted = placement.fitted
    f = pos[fit_here]
    out["cluster_id"][fit_here], out["membership"][fit_here] = fitted.labels[f], fitted.strength[f]
    out["tier"][fit_here], out["reassigned"][fit_here] = fitted.tier[f], fitted.reassigned[f]
    out["local_error_rate"][fit_here], out["xy"][fit_here] = placement.rate[f], placement.xy[f]
    vectors = placement.fitted_vectors()
    unit = np.zeros((n, vectors.shape[1]), dtype=np.float32)
    unit[fit_here] = unit_rows(vectors[f])
    if len(rest):
        part = frame.iloc[rest]
        part = part if placement.column == "text" else part.assign(text=part[placement.column].fillna("").astype(str))
        X = _embedded(placement.embedder, part, vectors.shape[1])
        placed, near, dist = place(X, vectors, fitted, placement.d90) if placement.modes is None else place_by_mode(
            part["failure_reason"].astype(str).tolist(), X, vectors, fitted, placement.modes, placement.d90)
        out["cluster_id"][rest], out["membership"][rest] = placed.labels, placed.strength
        out["tier"][rest] = placed.tier
        out["xy"][rest] = near_mean(placement.xy, near, dist)
        unit[rest] = unit_rows(X)
    context = np.flatnonzero(~failed)
    for r in context:
        xy = placement.context_xy.get(frame["example_id"].iat[r])
        if xy is not None:
            out["xy"][r] = xy
    from erroranalysis.engines.blocks import write_shard

    write_shard(placement.folder, block, _table(frame, failed, out))
    labels = out["cluster_id"]
    sizes, first, sums = {}, {}, {}
    for c in np.unique(labels[labels >= 0]):
        rows = np.flatnonzero(labels == c)
        sizes[int(c)], first[int(c)] = len(rows), block.start + int(rows[0])
        sums[int(c)] = unit[rows].sum(axis=0, dtype=np.float64)
    return {"sizes": sizes, "first": first, "sums": sums, "failures": int(failed.sum()), "placed": len(rest)}


def merge_counts(results) -> dict:
    """The sum of `place_block` results."""
    total = {"sizes": Counter(), "first": {}, "sums": {}, "failures": 0, "placed": 0}
    for part in results:
        total["sizes"].update(part["sizes"])
        for c, row in part["first"].items():
            total["first"][c] = min(row, total["first"].get(c, row))
        for c, s in part["sums"].items():
            total["sums"][c] = total["sums"][c] + s if c in total["sums"] else s
        total["failures"] += part["failures"]
        total["placed"] += part["placed"]
    return total


def renumber_block(table, block, *, mapping: dict, folder: str) -> int:
    """Pass 4: the shard's cluster ids renumbered (`mapping`: raw id -> id by size), written back in place."""
    import pyarrow as pa

    from erroranalysis.engines.blocks import write_shard

    raw = table["cluster_id"].to_numpy(zero_copy_only=False)
    lookup = np.vectorize(lambda c: mapping.get(int(c), -1), otypes=[np.int32])
    new = lookup(raw) if len(raw) else raw.astype(np.int32)
    index = table.schema.get_field_index("cluster_id")
    write_shard(folder, block, table.set_column(index, "cluster_id", pa.array(new, type=pa.int32())))
    return int(block.rows)


def _embedded(embedder, frame, dim: int) -> np.ndarray:
    name = getattr(embedder, "key", "custom")
    vectors = np.asarray(embedder.embed(frame), dtype=np.float32)
    if vectors.ndim != 2 or len(vectors) != len(frame) or vectors.shape[1] != dim:
        raise DataError(f"embedder {name!r}: returned shape {vectors.shape} for {len(frame)} texts; it must "
                        f"return one row of {dim} values per text.")
    if not np.isfinite(vectors).all():
        raise DataError(f"embedder {name!r}: returned NaN or infinite values.")
    return vectors


def _unclustered(frame, failed) -> dict:
    n = len(frame)
    return {"cluster_id": np.full(n, -1, dtype=np.int64), "membership": np.zeros(n, dtype=np.float32),
            "reassigned": np.zeros(n, dtype=bool), "tier": np.full(n, "", dtype=object),
            "local_error_rate": np.full(n, np.nan, dtype=np.float32), "xy": np.full((n, 2), np.nan, np.float32)}


def assignments_frame(example_ids, failed, out: dict):
    """assignments.parquet's columns, in the one layout both engines write."""
    import pandas as pd

    n = len(failed)
    return pd.DataFrame({
        "example_id": np.asarray(example_ids), "cluster_id": np.asarray(out["cluster_id"]).astype(np.int32),
        "failure": np.asarray(failed, dtype=bool), "membership": np.asarray(out["membership"], dtype=np.float32),
        "reassigned": np.asarray(out["reassigned"], dtype=bool),
        "tier": pd.array(np.asarray(out["tier"]).astype(str), dtype="string") if n else pd.array([], dtype="string"),
        "local_error_rate": np.asarray(out["local_error_rate"], dtype=np.float32),
        "x": out["xy"][:, 0].astype(np.float32), "y": out["xy"][:, 1].astype(np.float32)})


def _table(frame, failed, out: dict):
    import pyarrow as pa

    return pa.Table.from_pandas(assignments_frame(frame["example_id"].to_numpy(), failed, out), preserve_index=False)
