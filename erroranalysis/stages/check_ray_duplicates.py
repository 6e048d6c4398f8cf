"""The duplicate search of the checks stage under `--engine ray` (`data_checks_ray.py` runs it): exact groups, one
task per partition of the rows' text keys; near duplicates, one task over the seeded sample's vectors; and each
block's duplicate columns for the write pass. Here too the scratch-file helpers the passes of the checks' Ray
modules use: scratch is a local folder or a prefix on object storage (`inputs.stage_scratch`), read and written
through `core.shards` alone; the passes get it as a string (`shards.location` turns it back). The passes are
module-level: Ray pickles them."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from erroranalysis.core import shards
from erroranalysis.datachecks import blockwise as bw
from erroranalysis.engines import blocks as eb


def write_npz(folder, name: str, **arrays) -> None:
    """`arrays` into the .npz scratch file `name` of `folder`, written whole (`shards.write`)."""
    def save(tmp: Path) -> None:
        with open(tmp, "wb") as f:  # a file object: np.savez would add ".npz" to a path
            np.savez(f, **arrays)

    shards.write(folder, name, save, digest=False)


def write_npy(folder, name: str, array: np.ndarray) -> None:
    """`array` as the .npy scratch file `name` of `folder`, written whole (`shards.write`)."""
    from erroranalysis.core import files

    shards.write(folder, name, files.npy_writer(array), digest=False)


def load_shards(scratch, name) -> tuple[np.ndarray, dict]:
    """The shards of `name` in row order: (vectors, {column: values})."""
    folder = shards.location(scratch) / name
    found = shards.listed(folder, ".npy")
    parts = [shards.load_npy(folder / s) for s in found]
    vectors = np.concatenate([p for p in parts if p.size]) if any(p.size for p in parts) else np.zeros((0, 0))
    extras = set(shards.listed(folder, ".npz"))
    columns: dict = {}
    for s in found:
        extra = s[:-len(".npy")] + ".npz"
        if extra in extras:
            for key, values in shards.load_npz(folder / extra).items():
                columns.setdefault(key, []).append(values)
    return vectors, {k: np.concatenate(v) for k, v in columns.items()}


def binary16(keys: np.ndarray):
    """16-byte keys as Arrow, from their bytes (numpy's tolist() would drop trailing zero bytes)."""
    import pyarrow as pa

    return pa.FixedSizeBinaryArray.from_buffers(pa.binary(16), len(keys), [None, pa.py_buffer(keys.tobytes())])


def within(rows: np.ndarray, block) -> np.ndarray:
    """Positions within the block of the sorted global `rows` that fall in it."""
    a, b = np.searchsorted(rows, [block.start, block.stop])
    return (rows[a:b] - block.start).astype(np.int64)


def save_shard(scratch, name, block, vectors, **columns) -> None:
    """A block's vectors (and `columns` beside them) as the `name` shards `load_shards` reads."""
    folder = shards.location(scratch) / name
    stem = eb.SHARD.format(start=block.start)[:-len(".parquet")]
    if columns:  # before the vectors: a reader that lists the .npy finds its .npz there
        write_npz(folder, f"{stem}.npz", **columns)
    write_npy(folder, f"{stem}.npy", np.ascontiguousarray(vectors, dtype=np.float32))


def _task_table(scratch, name: str, values: list):
    """A Parquet file of one row per task in scratch (`map_blocks` with one row per block runs one task per value)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    shards.write(scratch, name, lambda p: pq.write_table(pa.table({"task": values}), p, row_group_size=1),
                 digest=False)
    return scratch / name


def duplicates(scratch, blocks, n_buckets: int, near: bool, params, engine) -> dict:
    """Steps 3 and 4 of `data_checks_ray`: exact groups per key partition, near pairs on the sample; the per-row
    lookups the write pass needs and the summary (as `duplicates.duplicate_summary`)."""
    pairs: list = []
    if near:
        tasks = _task_table(scratch, "near-task.parquet", [0])
        for _, found in eb.map_blocks(_near_pairs, tasks, engine, rows_per_block=1, kwargs={
                "scratch": str(scratch), "threshold": params.near_threshold, "k": params.neighbors,
                "block_size": params.block_size}):
            pairs = found
    near_keys = frozenset(k for pair in pairs for k in pair)
    starts = np.asarray([b.start for b in blocks], dtype=np.int64)
    tasks = _task_table(scratch, "bucket-tasks.parquet", list(range(n_buckets)))
    per_block = np.zeros(len(blocks), np.int64)
    counts = {"n_groups": 0, "n_examples": 0, "n_conflict_groups": 0, "n_examples_in_conflicts": 0}
    top, summaries = [], {}
    for _, got in eb.map_blocks(_bucket, tasks, engine, rows_per_block=1, kwargs={
            "scratch": str(scratch), "near_keys": near_keys, "starts": starts}):
        per_block += got["per_block"]
        for key in counts:
            counts[key] += got["counts"][key]
        top = bw.keep_top(top + got["top"])
        summaries.update(got["near"])
    components = bw.near_components(pairs, summaries)
    unique = {id(c): c for c in components.values()}.values()
    near_firsts = np.sort(np.asarray([c["first"] for c in unique], dtype=np.int64))
    per_block += np.bincount(np.searchsorted(starts, near_firsts, side="right") - 1, minlength=len(blocks))
    offsets = np.r_[0, np.cumsum(per_block)[:-1]]
    top = bw.keep_top(top + [bw.group_entry(c, "near") for c in unique])
    firsts_of = functools.partial(_firsts_of, str(scratch), tuple(starts.tolist()), near_firsts)
    numbers = bw.group_numbers(np.asarray([e["first"] for e in top], np.int64), starts, offsets, firsts_of)
    n_near = len(near_firsts)
    n_groups = counts["n_groups"] + n_near
    n_examples = counts["n_examples"] + sum(c["size"] for c in unique)
    n_conflict = [c for c in unique if len(c["labels"]) > 1]
    summary = {
        "n_groups": n_groups, "n_exact_groups": counts["n_groups"], "n_near_groups": n_near,
        "n_examples_in_groups": n_examples, "n_redundant": n_examples - n_groups,
        "n_conflict_groups": counts["n_conflict_groups"] + len(n_conflict),
        "n_examples_in_conflicts": counts["n_examples_in_conflicts"] + sum(c["size"] for c in n_conflict),
        "groups": [{"group": int(g), "kind": e["kind"], "size": e["size"], "conflict": e["conflict"],
                    "example_ids": e["example_ids"], "labels": e["labels"]} for g, e in zip(numbers, top)]}
    near_rows = {key: (c["first"], len(c["labels"]) > 1) for key, c in components.items()}
    return {"summary": summary, "per_row": {"near": near_rows, "offsets": offsets, "starts": starts,
                                            "near_firsts": near_firsts}}


def _firsts_of(scratch: str, starts: tuple, near_firsts: np.ndarray, b: int) -> np.ndarray:
    """Sorted first rows of the groups that start in block `b`: the partitions' files and the near groups'."""
    folder = shards.location(scratch) / "firsts" / str(starts[b])
    parts = [shards.load_npy(folder / f) for f in shards.listed(folder, ".npy", prefix="")]
    stop = starts[b + 1] if b + 1 < len(starts) else np.iinfo(np.int64).max
    parts.append(near_firsts[(near_firsts >= starts[b]) & (near_firsts < stop)])
    return np.sort(np.concatenate(parts))


def _near_pairs(table, block, *, scratch, threshold, k, block_size):
    """Near-duplicate pairs among the sample's distinct texts (each key's first sampled row): pairs of keys."""
    from erroranalysis.datachecks.duplicates import exact_representatives, near_duplicate_pairs

    vectors, columns = load_shards(scratch, "sample")
    keys = columns.get("keys", np.zeros(0, "S16"))
    if len(keys) < 2:
        return []
    reps, _ = exact_representatives(keys)
    if len(reps) < 2:
        return []
    pairs = near_duplicate_pairs(vectors[reps], threshold=threshold, k=k, block_size=block_size)
    rep_keys = keys[reps]
    return [(bytes(rep_keys[i]), bytes(rep_keys[j])) for i, j in zip(pairs["i"], pairs["j"])]


def _bucket(table, block, *, scratch, near_keys, starts):
    import pyarrow as pa

    p = int(table.column("task")[0].as_py())
    scratch = shards.location(scratch)
    folder = scratch / "hashes" / str(p)
    found = shards.listed(folder, ".parquet")
    if not found:
        return {"per_block": np.zeros(len(starts), np.int64), "counts": {"n_groups": 0, "n_examples": 0,
                "n_conflict_groups": 0, "n_examples_in_conflicts": 0}, "top": [], "near": {}}
    data = pa.concat_tables([shards.read_table(folder / s) for s in found])
    keys = np.asarray(data.column("key").to_pylist(), dtype="S16")
    got = bw.bucket_groups(keys, data.column("row").to_numpy(), np.asarray(data.column("label").to_pylist(), object),
                           np.asarray(data.column("example_id").to_pylist(), object), near_keys)
    rows, first, conflict = got.pop("assign")
    where = np.searchsorted(starts, rows, side="right") - 1
    for b in np.unique(where):
        mine = where == b
        write_npz(scratch / "assign" / str(starts[b]), f"{p}.npz", rows=rows[mine], first=first[mine],
                  conflict=conflict[mine])
    firsts = got.pop("firsts")
    fb = np.searchsorted(starts, firsts, side="right") - 1
    for b in np.unique(fb):
        write_npy(scratch / "firsts" / str(starts[b]), f"{p}.npy", firsts[fb == b])
    got["per_block"] = np.bincount(fb, minlength=len(starts)).astype(np.int64)
    return got


def duplicate_columns(table, block, rows, dups, scratch):
    from erroranalysis.datachecks.duplicates import text_keys

    n = block.rows
    first = np.full(n, -1, np.int64)
    conflict = np.zeros(n, bool)
    kind = np.full(n, "", dtype=object)
    folder = shards.location(scratch) / "assign" / str(block.start)
    for f in shards.listed(folder, ".npz", prefix=""):
        z = shards.load_npz(folder / f)
        at = z["rows"] - block.start
        first[at], conflict[at], kind[at] = z["first"], z["conflict"], "exact"
    if dups["near"]:
        keys = text_keys(table.column("text").to_pylist())
        for i, key in enumerate(keys.tolist()):
            hit = dups["near"].get(key)
            if hit is not None:
                first[i], conflict[i], kind[i] = hit[0], hit[1], "near"
    group = np.full(n, -1, np.int64)
    grouped = first >= 0
    if grouped.any():
        starts = dups["starts"]
        firsts_of = functools.partial(_firsts_of, scratch, tuple(starts.tolist()), dups["near_firsts"])
        group[grouped] = bw.group_numbers(first[grouped], starts, dups["offsets"], firsts_of)
    return group, kind, conflict
