"""Under `--engine ray` the workers read a `save_to_disk` folder (a Dataset, or a DatasetDict's `--split`) through a
Parquet copy one worker streams from its Arrow files (`sources.blocks.to_parquet`): `run`, `analyze` and the
`--train` checks give the in-process artifacts and one-line errors.

Real folders saved by `datasets`, the real stages, the shared local Ray; blocks of 25 rows.
"""

from __future__ import annotations

import io

import datasets
import numpy as np
import pandas as pd
import pytest
from conftest import eval_rows
from test_checks_ray_train import both_engines, leaky, ray_stated  # noqa: F401  (leaky: a fixture, a run)
from test_contamination_ray import both, generation  # noqa: F401  (generation: a generation run and its SFT file)
from test_ray_inputs import AFTER, analyze, data_entry, predictions

from erroranalysis import stages
from erroranalysis.core.errors import DataError
from erroranalysis.engines import Engine
from erroranalysis.sources.table import DataOptions


@pytest.fixture(autouse=True)
def _small_blocks(monkeypatch):
    import erroranalysis.engines.blocks as engine_blocks
    import erroranalysis.stages.infer as infer_stage

    monkeypatch.setattr(engine_blocks, "ROWS_PER_BLOCK", 25)
    monkeypatch.setattr(infer_stage, "CHUNK_ROWS", 25)


def save(folder, rows: list[dict], kind: str = "dataset", shards: int = 2):
    """`rows` saved with `save_to_disk` in `shards` Arrow files: a Dataset, or a DatasetDict whose "test" split they
    are (beside a "train" split of other rows)."""
    data = datasets.Dataset.from_list(rows)
    if kind == "dict":
        data = datasets.DatasetDict({"train": datasets.Dataset.from_list(rows[:7]), "test": data})
        data.save_to_disk(str(folder), num_shards={"train": 1, "test": shards})
    else:
        data.save_to_disk(str(folder), num_shards=shards)
    return folder


def test_the_copy_streams_a_multi_file_folder(tmp_path, monkeypatch):
    """The copy is the in-process reader's rows (order, `_line`, types) and is written row group by row group as
    the Arrow batches come: the first row group is on its way before the last batch is read."""
    import pyarrow.parquet as pq

    from erroranalysis.sources import blocks
    from erroranalysis.sources import table as tables

    folder = save(tmp_path / "ds", eval_rows(1000), shards=4)
    assert len(list(folder.glob("data-*.arrow"))) == 4
    whole, _ = tables.read_table(folder)
    read, written = [], []
    stream = tables.dataset_batches

    def counted(path, split):  # the in-process stream, its batches counted as they are read
        where, found = stream(path, split)
        return where, (read.append(batch.num_rows) or batch for batch in found)

    class Writer(pq.ParquetWriter):
        def write_table(self, table, *args, **kwargs):
            written.append((len(read), table.num_rows))  # (batches read so far, rows of this row group)
            super().write_table(table, *args, **kwargs)

    monkeypatch.setattr(tables, "dataset_batches", counted)
    monkeypatch.setattr(pq, "ParquetWriter", Writer)
    monkeypatch.setattr(blocks, "COPY_ROW_GROUP", 300)
    assert blocks.to_parquet(folder, tmp_path / "copy.parquet") == 1000
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "copy.parquet"), whole)
    assert whole["_line"].tolist() == list(range(1, 1001))
    assert len(read) >= 4 and written[0][0] < len(read)
    assert max(rows for _, rows in written) < 300 + max(read)  # a row group holds at most one batch past the size


def test_run_reads_a_datasets_folder_on_the_workers(local_ray, tiny_checkpoint, tmp_path):
    folder = save(tmp_path / "ds", eval_rows(100), "dict")
    opts = DataOptions(id_column="id", split="test")
    infer = stages.InferParams(batch_size=8)
    local = stages.run_checkpoint(tiny_checkpoint, folder, tmp_path / "local", data_opts=opts, infer_opts=infer,
                                  after=AFTER)
    distributed = stages.run_checkpoint(tiny_checkpoint, folder, tmp_path / "ray", data_opts=opts, infer_opts=infer,
                                        after=AFTER, engine=Engine("ray", concurrency=1))
    assert distributed.manifest["stages"]["infer"]["read_by"] == "workers"
    a, b = local.predictions(), distributed.predictions()
    assert a.columns.tolist() == b.columns.tolist() and len(a) == 100
    for column in ("example_id", "text", "label", "pred", "correct", "truncated", "source", "stars"):
        assert a[column].tolist() == b[column].tolist(), column
    np.testing.assert_allclose(np.asarray(distributed.probs()), np.asarray(local.probs()), atol=1e-5)
    assert data_entry(local) == data_entry(distributed) and data_entry(local)["format"] == "hf_dataset"
    assert not list(tmp_path.glob(".ray.rows-*"))


def test_analyze_reads_a_predictions_folder_on_the_workers(local_ray, tmp_path):
    folder = save(tmp_path / "preds", predictions("scores"), shards=3)  # `stars` null in some blocks only
    local, distributed = analyze(folder, tmp_path / "local", "local"), analyze(folder, tmp_path / "ray", "ray")
    assert distributed.manifest["stages"]["load_predictions"]["read_by"] == "workers"
    pd.testing.assert_frame_equal(local.predictions(), distributed.predictions())
    np.testing.assert_array_equal(np.asarray(local.probs()), np.asarray(distributed.probs()))
    assert data_entry(local) == data_entry(distributed)
    assert not list(tmp_path.glob(".ray.rows-*"))


@pytest.mark.parametrize("bad", ["cell", "no_such_split", "no_split_chosen"])
def test_a_bad_cell_or_split_is_the_in_process_error(local_ray, tmp_path, bad):
    rows = predictions("prob_columns")
    if bad == "cell":
        rows[87]["prob_neutral"] = 2.0  # in the fourth block
    folder = save(tmp_path / "preds", rows, "dataset" if bad == "cell" else "dict")
    split = {"cell": None, "no_such_split": "validation", "no_split_chosen": None}[bad]
    reading = stages.Reading(data=DataOptions(id_column="id", split=split))
    errors = []
    for engine in ("local", "ray"):
        with pytest.raises(DataError) as caught:
            stages.analyze("classification", folder, tmp_path / engine, reading, after=AFTER, engine=Engine(engine))
        errors.append(str(caught.value))
    assert errors[0] == errors[1] and "\n" not in errors[0]
    assert {"cell": "line 88, column 'prob_neutral'", "no_such_split": "no split 'validation'; splits found:",
            "no_split_chosen": "choose one with --split"}[bad] in errors[0]
    assert not (tmp_path / "ray" / "predictions.parquet").exists()
    assert not list(tmp_path.glob(".ray.rows-*"))


def test_train_folder_checks_on_ray_equal_in_process(local_ray, leaky, monkeypatch):  # noqa: F811
    """`--train FOLDER --train-split train` of a classification run: the workers read the split's copy."""
    run_path, folder = leaky
    train = pd.read_json(folder / "train.jsonl", lines=True)
    datasets.DatasetDict({"train": datasets.Dataset.from_pandas(train, preserve_index=False),
                          "other": datasets.Dataset.from_pandas(train.head(3), preserve_index=False)}
                         ).save_to_disk(str(folder / "train_ds"), num_shards={"train": 2, "other": 1})
    stream = io.StringIO()
    (frame, report), (ray_frame, ray_report) = both_engines(run_path, monkeypatch, stream,
                                                            train=str(folder / "train_ds"), split="train")
    assert "on the driver" not in stream.getvalue()
    pd.testing.assert_frame_equal(frame, ray_frame)
    assert ray_stated(ray_report)["train"] == {"rows": 300, "of": 300, "seed": 0}
    assert ray_report == report
    assert ray_report["leakage"]["n_exact"] == 10 and ray_report["shift"]["n_train"] == 300


def test_contamination_of_a_train_folder_on_ray_equals_in_process(local_ray, generation, monkeypatch):  # noqa: F811
    """A generation run's `--train FOLDER --train-split test` (chat messages: lists of structs in Arrow)."""
    root, train = generation
    rows = pd.read_json(train, lines=True).to_dict("records")
    save(root / "sft_ds", rows, "dict", shards=3)
    (frame, found), (ray_frame, ray_found) = both(root / "run", monkeypatch, train=str(root / "sft_ds"),
                                                  split="test")
    pd.testing.assert_frame_equal(frame, ray_frame)
    assert ray_found["params"].pop("engine") == "ray"
    assert found["contamination"] == ray_found["contamination"]
    assert frame["in_train"].to_numpy(dtype=bool).sum() == 25  # the planted rows: equal over something found
