"""A Parquet eval set read in row ranges (what Ray workers read, erroranalysis.sources.blocks) gives the rows, ids, line
numbers and one-line errors of reading the whole file in-process; the driver's scan gives the same data entry."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import LABELS, eval_rows

from erroranalysis.core.errors import DataError
from erroranalysis.infer.predictions import input_table
from erroranalysis.sources import blocks
from erroranalysis.sources.table import DataOptions, read_eval_set


def _parquet(path, rows):
    pd.DataFrame(rows).to_parquet(path, row_group_size=32)
    return path


@pytest.mark.parametrize("id_column", ["id", None])
def test_blocks_give_the_rows_of_the_whole_file(tmp_path, id_column):
    data = _parquet(tmp_path / "eval.parquet", eval_rows(200))
    opts = DataOptions(id_column=id_column)
    whole = read_eval_set(data, opts)
    parts = [blocks.block(data, start, min(45, 200 - start), opts, LABELS)[0].frame for start in range(0, 200, 45)]
    pd.testing.assert_frame_equal(pd.concat(parts, ignore_index=True), whole.frame)

    scanned = blocks.scan(data, opts, LABELS)
    assert len(scanned) == 200 and len(scanned.frame) == 200  # all within the first rows read
    assert scanned.describe() == {**whole.describe(), "n_cut": None}
    assert scanned.sources == {c: c for c in whole.metadata_columns}  # id is metadata without --id-column


def test_a_bad_value_in_a_block_is_the_in_process_error(tmp_path):
    rows = eval_rows(100)
    rows[70]["label"] = "nonsense"
    data = _parquet(tmp_path / "eval.parquet", rows)
    with pytest.raises(DataError) as whole:
        from erroranalysis.sources.table import map_labels

        eval_set = read_eval_set(data, DataOptions(id_column="id"))
        map_labels(eval_set.frame["label"].to_numpy(), LABELS, source=str(eval_set.path),
                   lines=eval_set.frame["_line"].to_numpy())
    with pytest.raises(DataError) as block:
        blocks.block(data, 64, 36, DataOptions(id_column="id"), LABELS)
    assert str(block.value) == str(whole.value) and "line 71, column 'label'" in str(block.value)


def test_an_id_used_in_two_blocks_is_found_from_hashes(tmp_path):
    rows = eval_rows(100)
    rows[80]["id"] = rows[5]["id"]
    data = _parquet(tmp_path / "eval.parquet", rows)
    opts = DataOptions(id_column="id")
    with pytest.raises(DataError) as whole:
        read_eval_set(data, opts)
    hashes = np.concatenate([blocks.id_hashes(blocks.block(data, s, 50, opts, LABELS)[0].frame["example_id"])
                             for s in (0, 50)])  # each block alone is fine
    with pytest.raises(DataError) as found:
        blocks.duplicate_ids(hashes, data, opts)
    assert str(found.value) == str(whole.value)
    blocks.duplicate_ids(blocks.id_hashes([r["id"] for r in eval_rows(100)]), data, opts)  # unique: no error


def test_a_block_keeps_the_files_column_types(tmp_path):
    """An integer column with a null in one block: pandas makes it float there, the shard is cast back."""
    stars = pa.array([1, 2, None, 4] + [5] * 60, pa.int64())
    rows = eval_rows(64)
    table = pa.table({"id": [r["id"] for r in rows], "text": [r["text"] for r in rows],
                      "label": [r["label"] for r in rows], "stars": stars})
    data = tmp_path / "eval.parquet"
    pq.write_table(table, data, row_group_size=32)
    scanned = blocks.scan(data, DataOptions(id_column="id"), LABELS)
    types = []
    for start in (0, 32):
        eval_set, gold = blocks.block(data, start, 32, DataOptions(id_column="id"), LABELS)
        chunk = blocks.conform(input_table(eval_set.frame, gold, LABELS, eval_set.metadata_columns),
                               pq.ParquetFile(data).schema_arrow, scanned.sources)
        types.append(chunk.schema.field("stars").type)
    assert types == [pa.int64(), pa.int64()]


def test_only_a_parquet_file_is_read_in_blocks(tmp_path):
    assert blocks.readable(_parquet(tmp_path / "eval.parquet", eval_rows(5)))
    (tmp_path / "eval.jsonl").write_text("{}\n")
    assert not blocks.readable(tmp_path / "eval.jsonl") and not blocks.readable(tmp_path / "missing.parquet")
