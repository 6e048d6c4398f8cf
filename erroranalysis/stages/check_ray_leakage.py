"""The leakage of a run's training file under `--engine ray` (steps 2 and 3 of `check_ray_train`):
one task per key partition joins each eval row to the first training row of its text (exact, every row), one task
searches the sampled eval rows against the sampled training rows for near copies, and each eval block's write pass
fills its leakage columns of checks.parquet from what they wrote. The passes are module-level: Ray pickles them."""

from __future__ import annotations

import numpy as np

from erroranalysis.core import shards
from erroranalysis.datachecks import train_blocks as tb
from erroranalysis.engines import blocks as eb
from erroranalysis.stages.check_ray_duplicates import load_shards


def leakage(scratch, eval_starts: list[int], n_buckets: int, near: bool, params, engine) -> dict:
    """The exact join per key partition (written per eval block) and the near matches of the sample: what the write
    pass needs."""
    eb.call_each(_join, engine, [{"scratch": str(scratch), "p": p, "starts": np.asarray(eval_starts, np.int64)}
                                 for p in range(n_buckets)])
    found = {}
    if near:
        found = eb.call_on_worker(_near, engine, scratch=str(scratch), threshold=params.near_threshold,
                                  block_size=params.block_size)
    return {"near": found, "scratch": str(scratch)}


def _read_part(folder):
    import pyarrow as pa

    found = shards.listed(folder, ".parquet")
    if not found:
        return None
    data = pa.concat_tables([shards.read_table(folder / s) for s in found])
    return {"key": np.asarray(data.column("key").to_pylist(), dtype="S16"), "row": data.column("row").to_numpy(),
            "label": np.asarray(data.column("label").to_pylist(), dtype=object),
            "example_id": np.asarray(data.column("example_id").to_pylist(), dtype=object)}


def _join(scratch: str, p: int, starts: np.ndarray) -> None:
    """Partition `p`: each eval row's first training row of the same text, written per eval block."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    scratch = shards.location(scratch)
    evals = _read_part(scratch / "hashes" / str(p))
    train = _read_part(scratch / "train-hashes" / str(p))
    if evals is None or train is None:
        return None
    first = tb.first_rows(train["key"], train["row"])
    at = tb.join(evals["key"], train["key"][first])
    hit = at >= 0
    rows, match = evals["row"][hit], first[at[hit]]
    where = np.searchsorted(starts, rows, side="right") - 1
    for b in np.unique(where):
        mine = where == b
        table = pa.table({"row": rows[mine], "train_row": train["row"][match[mine]],
                          "train_id": train["example_id"][match[mine]].tolist(),
                          "train_label": train["label"][match[mine]].tolist()})
        shards.write(scratch / "leak" / str(starts[b]), f"{p}.parquet", lambda f, t=table: pq.write_table(t, f),
                     digest=False)
    return None


def _near(scratch: str, threshold: float, block_size: int) -> dict:
    """The sampled eval texts' closest sampled training text at or above `threshold` (one per distinct text on each
    side, first row first, as `find_leakage`): {eval key: (train row, similarity, train id, train label)}."""
    from erroranalysis.datachecks.duplicates import exact_representatives, top_k_neighbors

    q_all, evals = load_shards(scratch, "sample")
    x_all, train = load_shards(scratch, "train-near")
    if not len(evals.get("keys", ())) or not len(train.get("keys", ())):
        return {}
    q_reps, _ = exact_representatives(evals["keys"])
    x_reps, _ = exact_representatives(train["keys"])
    idx, sims = top_k_neighbors(q_all[q_reps], x_all[x_reps], k=1, min_similarity=threshold, block_size=block_size)
    out = {}
    for qi, (j, s) in enumerate(zip(idx[:, 0], sims[:, 0])):
        if j >= 0:
            t = x_reps[j]
            out[bytes(evals["keys"][q_reps[qi]])] = (int(train["rows"][t]), float(s), str(train["ids"][t]),
                                                    str(train["labels"][t]))
    return out


# -- step 3: the write pass -------------------------------------------------------------------------------------


def leak_columns(frame, table, block, leak: dict, labels: list[str], ids_are_labels: bool) -> dict:
    """This eval block's leakage columns of checks.parquet (into `frame`), and its share of the summary."""
    import pandas as pd

    from erroranalysis.datachecks.duplicates import text_keys

    n = block.rows
    train_row = np.full(n, -1, np.int64)
    train_id = np.full(n, None, dtype=object)
    train_label = np.full(n, "", dtype=object)
    similarity = np.full(n, np.nan, np.float32)
    kind = np.full(n, "", dtype=object)
    folder = shards.location(leak["scratch"]) / "leak" / str(block.start)
    for f in shards.listed(folder, ".parquet", prefix=""):
        part = shards.read_table(folder / f)
        at = part.column("row").to_numpy() - block.start
        train_row[at] = part.column("train_row").to_numpy()
        train_id[at] = part.column("train_id").to_pylist()
        train_label[at] = part.column("train_label").to_pylist()
        similarity[at], kind[at] = 1.0, "exact"
    if leak["near"]:
        for i, key in enumerate(text_keys(table.column("text").to_pylist()).tolist()):
            hit = leak["near"].get(key)
            if hit is not None and train_row[i] < 0:
                train_row[i], similarity[i], train_id[i], train_label[i] = hit
                kind[i] = "near"
    hit = train_row >= 0
    train_label[hit] = tb.class_names(train_label[hit], labels, ids_are_labels)
    gold = np.asarray(table.column("label").to_pylist(), dtype=object)
    frame["in_train"] = pd.array(hit, dtype="boolean")
    frame["train_id"] = pd.array(np.where(hit, train_id, None), dtype="string")
    frame["train_similarity"] = similarity
    differs = hit & (gold.astype(str) != train_label.astype(str))
    frame["train_label_differs"] = pd.array(differs, dtype="boolean")
    example_ids = np.asarray(table.column("example_id").to_pylist(), dtype=object)
    return tb.leak_part(np.arange(block.start, block.stop), example_ids, gold, train_row, train_id, train_label, kind,
                        similarity)
