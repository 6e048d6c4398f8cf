"""`engines.blocks`: a Parquet artifact cut into blocks from its footers, each read alone, and a function mapped over
them whose results merge to the whole's; a bad value in a block is the in-process one-line error."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from erroranalysis.core.errors import DataError
from erroranalysis.engines import blocks


def _artifact(tmp_path, n=1000, sharded=False):
    table = pa.table({"x": np.arange(n, dtype=np.int64), "y": np.arange(n, dtype=np.int64) % 7})
    if not sharded:
        path = tmp_path / "one.parquet"
        pq.write_table(table, path, row_group_size=130)  # row groups that straddle the blocks
        return path, table
    path = tmp_path / "shards.parquet"
    path.mkdir()
    for start in (0, 333, 334, 900):  # uneven shards, one of a single row
        stop = {0: 333, 333: 334, 334: 900, 900: n}[start]
        pq.write_table(table.slice(start, stop - start), path / f"part-{start:012d}.parquet", row_group_size=100)
    return path, table


def _sum(table, block, column):
    return int(np.asarray(table[column]).sum()), block.start, table.num_rows


@pytest.mark.parametrize("sharded", [False, True])
@pytest.mark.parametrize("rows_per_block", [1, 97, 250, 5000])
def test_blocks_cover_every_row_once_and_read_their_own_rows(tmp_path, sharded, rows_per_block):
    path, table = _artifact(tmp_path, sharded=sharded)
    plan = blocks.plan(path, rows_per_block)
    assert [b.start for b in plan] == sorted(b.start for b in plan)
    assert sum(b.rows for b in plan) == table.num_rows == blocks.n_rows(plan)
    assert all(a.stop == b.start for a, b in zip(plan, plan[1:]))
    for block in plan[:: max(1, len(plan) // 20)]:
        assert blocks.read(block, ["x"])["x"].to_pylist() == list(range(block.start, block.stop))


def test_mapped_results_merge_to_the_whole(tmp_path):
    path, table = _artifact(tmp_path, sharded=True)
    pairs = blocks.map_blocks(_sum, path, None, columns=["y"], kwargs={"column": "y"}, rows_per_block=128,
                              ordered=True)
    assert sum(total for _, (total, _, _) in pairs) == int(np.asarray(table["y"]).sum())
    assert [start for _, (_, start, _) in pairs] == [b.start for b, _ in pairs]


def test_array_rows_follow_the_blocks(tmp_path):
    path, table = _artifact(tmp_path, n=500)
    values = np.arange(1000, dtype=np.float32).reshape(500, 2)
    np.save(tmp_path / "probs.npy", values)
    (tmp_path / "shards.npy").mkdir()
    for start in range(0, 500, 70):
        np.save(tmp_path / "shards.npy" / f"part-{start:012d}.npy", values[start:start + 70])
    for block in blocks.plan(path, 64):
        for source in ("probs.npy", "shards.npy"):
            assert np.array_equal(blocks.read_npy_rows(tmp_path / source, block), values[block.start:block.stop])


def _refuse_at(table, block, bad):
    rows = np.asarray(table["x"])
    if bad in rows:
        raise DataError(f"eval.parquet, row {bad}: not a label")
    return len(rows)


def test_a_bad_value_in_a_block_is_the_one_line_error(tmp_path):
    path, _ = _artifact(tmp_path)
    with pytest.raises(DataError, match="eval.parquet, row 777: not a label"):
        blocks.map_blocks(_refuse_at, path, None, kwargs={"bad": 777}, rows_per_block=100, ordered=True)


def test_shards_are_named_by_their_first_row(tmp_path):
    path, table = _artifact(tmp_path)
    plan = blocks.plan(path, 300)
    for block in reversed(plan):  # written in any order
        blocks.write_shard(tmp_path / "out.parquet", block, blocks.read(block))
    assert pq.read_table(tmp_path / "out.parquet").equals(table)
    assert blocks.files_of(tmp_path / "out.parquet")[1].endswith(f"part-{plan[1].start:012d}.parquet")


def test_blocks_read_whole_row_groups(tmp_path):
    path, _ = _artifact(tmp_path)  # row groups of 130 rows
    plan = blocks.plan(path, 300)
    assert [b.rows for b in plan] == [260] * 3 + [220]  # two groups a block; the last 1000 - 780
    assert all(b.offset == b.first_row for b in plan)
    assert [b.rows for b in blocks.plan(path, 100)][:3] == [100, 30, 100]  # a larger group is cut


def test_a_damaged_shard_is_the_readers_one_line_error(tmp_path):
    from erroranalysis.core.errors import RunError

    path, _ = _artifact(tmp_path, sharded=True)
    (path / "part-000000000334.parquet").write_bytes(b"not parquet")
    with pytest.raises(RunError, match=r"part-000000000334.parquet: unreadable, damaged .*run the stage"):
        blocks.map_blocks(_sum, path, None, kwargs={"column": "y"}, rows_per_block=100, ordered=True)
    (tmp_path / "probs.npy").mkdir()
    (tmp_path / "probs.npy" / "part-000000000000.npy").write_bytes(b"junk")
    with pytest.raises(RunError, match="unreadable, damaged"):
        blocks.read_npy_rows(tmp_path / "probs.npy", blocks.plan(path, 100)[0])
