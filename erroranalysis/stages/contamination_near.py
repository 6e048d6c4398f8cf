"""The near-duplicate training prompts of a generation run's contamination checks under `--engine ray`
(`contamination_ray`), MinHash LSH in partitions: each training block writes its prompts' band keys into the key's
partition, one task per partition groups them into candidate pairs (`near_duplicates.candidate_pairs`, the
distributed form of LSH's bucket lookup), one task per training block verifies the pairs of its rows by their exact
Jaccard similarity, and one task groups the verified pairs (`near_duplicates.groups`): the in-process section. The
tasks are module-level: Ray pickles them."""

from __future__ import annotations

import numpy as np

from erroranalysis.engines import blocks as eb
from erroranalysis.stages.contamination_scratch import TrainRows, at, by_part, read, write


def write_bands(scratch: str, block, prompts: list[str], n_parts: int, ranges, num_perm: int, seed: int) -> None:
    """A training block's prompts' LSH band keys into their partitions (`bands`)."""
    from erroranalysis.datachecks.near_duplicates import band_keys

    keys = band_keys(prompts, block.start, ranges, num_perm=num_perm, seed=seed)
    # keys are of one length (bands of as many hash values): a key's first 4 bytes, a uniform hash, partition it
    first = np.frombuffer(b"".join(keys["key"]), dtype=np.uint8).reshape(len(keys), -1)[:, :4].copy().view(
        np.uint32)[:, 0].astype(np.uint64) if len(keys) else np.zeros(0, np.uint64)
    by_part(scratch, "bands", block, first + keys["band"].to_numpy().astype(np.uint64), n_parts,
            row=keys["row"].to_numpy(), band=keys["band"].to_numpy(), key=np.asarray(keys["key"], dtype=object))


def bands(scratch: str, part: int, train_starts: list[int], **_) -> int:
    """One partition of the LSH band keys: its candidate pairs, sent to the training block of their first row."""
    import pyarrow as pa

    from erroranalysis.datachecks.near_duplicates import candidate_pairs

    table = read(at(scratch, "bands", str(part)))
    if table is None:
        return 0
    pairs = candidate_pairs(table.select(["row", "band", "key"]).to_pandas())
    where = np.searchsorted(np.asarray(train_starts), pairs["i"].to_numpy(), side="right") - 1
    for b in np.unique(where):
        mine = pairs[where == b]
        write(at(scratch, "candidates", str(train_starts[b])), f"part-{part:04d}.parquet",
              pa.Table.from_pandas(mine, preserve_index=False))
    return len(pairs)


def verify(scratch: str, start: int, train_starts: list[int], threshold: float, **_) -> int:
    """The candidate pairs whose first row is in one training block, verified by their exact Jaccard similarity."""
    import pyarrow as pa

    from erroranalysis.datachecks.near_duplicates import verified

    table = read(at(scratch, "candidates", str(start)))
    if table is None:
        return 0
    pairs = table.to_pandas().drop_duplicates(ignore_index=True)
    found = verified(pairs, TrainRows(scratch, train_starts, "prompt").__getitem__, threshold)
    write(at(scratch, "verified"), eb.SHARD.format(start=start), pa.Table.from_pandas(found, preserve_index=False))
    return len(found)


def near(scratch: str, train_starts: list[int], n_train: int, threshold: float, num_perm: int) -> dict:
    """The near-duplicate section from the verified pairs (in row order: each block's shard is sorted)."""
    import pandas as pd

    from erroranalysis.datachecks.contamination_report import near_duplicate_section
    from erroranalysis.datachecks.near_duplicates import groups

    table = read(at(scratch, "verified"))
    pairs = table.to_pandas() if table is not None else pd.DataFrame(
        {"i": np.zeros(0, np.int64), "j": np.zeros(0, np.int64), "similarity": np.zeros(0)})
    return near_duplicate_section(TrainRows(scratch, train_starts, "prompt", n_train), pairs, groups(n_train, pairs),
                                  TrainRows(scratch, train_starts, "id", n_train), threshold, num_perm)
