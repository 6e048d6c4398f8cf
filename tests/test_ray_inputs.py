"""Under `--engine ray` the workers read the inputs: `analyze` of Parquet, JSONL and CSV predictions files gives the
in-process artifacts, with the in-process one-line errors for a bad cell; `run` over a CSV eval set finds an id used
twice across blocks as in-process.

A real local Ray (`ray.init(num_cpus=2)`), the real stages; blocks of 25 rows, so every file is several blocks. `run`
over a JSONL eval set on Ray is tests/test_engines.py's parity case.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import LABELS, eval_rows, write_jsonl

from erroranalysis import stages
from erroranalysis.core.errors import DataError
from erroranalysis.engines import Engine
from erroranalysis.rundir import Run
from erroranalysis.sources.table import DataOptions

ROWS = 120
AFTER = stages.AfterParams.with_seed(0, checks=False, slices=False, cluster=False)


@pytest.fixture(autouse=True)
def _small_blocks(monkeypatch):
    import erroranalysis.engines.blocks as engine_blocks
    import erroranalysis.stages.infer as infer_stage

    monkeypatch.setattr(engine_blocks, "ROWS_PER_BLOCK", 25)
    monkeypatch.setattr(infer_stage, "CHUNK_ROWS", 25)


def predictions(output: str, n: int = ROWS) -> list[dict]:
    """Rows of a predictions file: the model's output as prob_<label> columns, a scores list, or labels only."""
    rng = np.random.default_rng(0)
    rows = []
    for i, row in enumerate(eval_rows(n)):
        p = rng.dirichlet(np.ones(3))
        row = {**row, "pred": LABELS[int(np.argmax(p))] if i % 7 else row["label"]}
        row["stars"] = None if i % 11 == 3 else row["stars"]  # nulls in some blocks only: one type across shards
        row["text"] += "\nits second line" if i == 5 else ""  # in a CSV, a quoted cell over two lines
        if output == "prob_columns":
            row.update({f"prob_{label}": float(p[j]) for j, label in enumerate(LABELS)})
        elif output == "scores":
            row["probs"] = [float(v) for v in p]
        rows.append(row)
    return rows


def write(path, rows: list[dict]):
    if path.suffix == ".jsonl":
        return write_jsonl(path, rows)
    frame = pd.DataFrame(rows)
    if path.suffix == ".csv":
        frame.to_csv(path, index=False)
    else:
        frame.to_parquet(path, index=False)
    return path


def analyze(data, out, engine: str):
    reading = stages.Reading(data=DataOptions(id_column="id"))
    return stages.analyze("classification", data, out, reading, after=AFTER, engine=Engine(engine))


def data_entry(run: Run) -> dict:
    return run.manifest["data"]


@pytest.mark.parametrize("suffix,output", [(".parquet", "prob_columns"), (".parquet", "scores"),
                                           (".parquet", "labels"), (".jsonl", "prob_columns"),
                                           (".jsonl", "scores"), (".jsonl", "labels"), (".csv", "prob_columns"),
                                           (".csv", "labels")])
def test_workers_read_predictions_as_in_process(local_ray, tmp_path, suffix, output):
    data = write(tmp_path / f"predictions{suffix}", predictions(output))
    local = analyze(data, tmp_path / "local", "local")
    distributed = analyze(data, tmp_path / "ray", "ray")
    assert (distributed.path / "predictions.parquet").is_dir()  # shards written by the workers
    assert len(list((distributed.path / "predictions.parquet").glob("part-*.parquet"))) == ROWS // 25 + 1
    assert distributed.manifest["stages"]["load_predictions"]["read_by"] == "workers"
    pd.testing.assert_frame_equal(local.predictions(), distributed.predictions())
    if output == "labels":
        assert not (distributed.path / "probs.npy").exists()
    else:
        np.testing.assert_array_equal(np.asarray(local.probs()), np.asarray(distributed.probs()))
    assert local.manifest["labels"] == distributed.manifest["labels"]
    assert data_entry(local) == data_entry(distributed)
    assert local.metrics()["overall"] == distributed.metrics()["overall"]
    assert not list(tmp_path.glob(".ray.rows-*"))  # the JSONL/CSV copy is gone


def test_labels_learned_from_every_block(local_ray, tmp_path):
    """No output columns and no --labels: the labels are every block's distinct gold and predicted ones."""
    rows = predictions("labels")
    rows[-1]["pred"] = "sarcastic"  # only in the last block
    data = write(tmp_path / "predictions.jsonl", rows)
    local, distributed = analyze(data, tmp_path / "local", "local"), analyze(data, tmp_path / "ray", "ray")
    assert distributed.manifest["labels"] == local.manifest["labels"] == sorted([*LABELS, "sarcastic"])


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl", ".csv"])
@pytest.mark.parametrize("bad", ["probability", "empty_prediction", "duplicate_id"])
def test_a_bad_cell_gives_the_in_process_error(local_ray, tmp_path, suffix, bad):
    rows = predictions("prob_columns")
    if bad == "probability":
        rows[87]["prob_neutral"] = 2.0
    elif bad == "empty_prediction":
        rows[61]["pred"] = ""
    else:
        rows[90]["id"] = rows[10]["id"]
    data = write(tmp_path / f"predictions{suffix}", rows)
    with pytest.raises(DataError) as local:
        analyze(data, tmp_path / "local", "local")
    with pytest.raises(DataError) as distributed:
        analyze(data, tmp_path / "ray", "ray")
    assert str(distributed.value) == str(local.value)
    # a CSV's header is line 1 and row 5's text spans two lines: later rows start 2 lines on
    line = {"probability": 88, "empty_prediction": 62, "duplicate_id": 91}[bad] + 2 * (suffix == ".csv")
    assert f"line {line}," in str(local.value)
    predictions_file = tmp_path / "ray" / "predictions.parquet"
    assert not predictions_file.exists()  # nothing committed
    if (tmp_path / "ray" / "manifest.json").exists():
        assert Run(tmp_path / "ray").manifest["stages"]["load_predictions"]["status"] == "failed"
    assert not list(tmp_path.glob(".ray.rows-*"))


def test_a_parquet_copy_reads_as_the_file(tmp_path):
    """`to_parquet` keeps what the in-process reader made of each line: nested and list metadata, the line numbers
    of a CSV whose quoted cell spans lines."""
    from erroranalysis.sources import blocks
    from erroranalysis.sources.table import load_eval_set

    rows = [{**row, "meta": {"lang": "en", "n": i}, "tags": ["a", "b"][: i % 3]} for i, row in
            enumerate(predictions("scores", 30))]
    for path in (write_jsonl(tmp_path / "p.jsonl", rows), write(tmp_path / "p.csv", predictions("labels", 30))):
        copy = tmp_path / f"{path.suffix[1:]}.parquet"
        assert blocks.to_parquet(path, copy) == 30
        opts = DataOptions(id_column="id")
        whole = load_eval_set(path, id_column="id", required=("pred",))
        read = blocks.rows_of(blocks.read_rows(copy, 0, 30), 0, opts, source=path, required=("pred",),
                              sha256=whole.sha256)
        assert read.metadata_columns == whole.metadata_columns
        pd.testing.assert_frame_equal(read.frame, whole.frame)


def test_a_column_parquet_cannot_hold_is_one_line(tmp_path):
    from erroranalysis.sources import blocks

    rows = predictions("labels", 10)
    rows[4]["source"] = {"site": "web"}  # a mapping where other lines hold text: the in-process error
    with pytest.raises(DataError, match=r"p.jsonl, line 5, column 'source': a dict {'site': 'web'} where line 1 "):
        blocks.to_parquet(write_jsonl(tmp_path / "p.jsonl", rows), tmp_path / "copy.parquet")
    rows[4]["source"] = 7  # a number where other lines hold text: Parquet has no such column
    with pytest.raises(DataError, match=r"p.jsonl: column 'source' mixes kinds of values"):
        blocks.to_parquet(write_jsonl(tmp_path / "p.jsonl", rows), tmp_path / "copy.parquet")
    assert not (tmp_path / "copy.parquet").exists()


@pytest.mark.parametrize("seed", range(4))
def test_ids_used_twice_are_found_from_any_split_as_in_process(tmp_path, seed):
    """The ids cut by hash per block (`write_id_parts`), each part checked alone: the in-process error, whatever
    the blocks, for the id whose first row comes first; none when every id is unique."""
    from erroranalysis.sources import blocks
    from erroranalysis.sources.table import load_eval_set

    rng = np.random.default_rng(seed)
    n = 300
    ids = [f"id{i}" for i in rng.permutation(n)]
    for _ in range(3):  # three ids used again, anywhere
        ids[int(rng.integers(n))] = ids[int(rng.integers(n))]
    rows = [{"id": i, "text": "t", "label": "a"} for i in ids]
    path = write_jsonl(tmp_path / "p.jsonl", rows)
    cuts = np.sort(rng.choice(np.arange(1, n), size=int(rng.integers(1, 8)), replace=False))
    for start, stop in zip([0, *cuts], [*cuts, n]):
        blocks.write_id_parts(tmp_path / "ids", int(start), np.asarray(ids[start:stop], dtype=object),
                              np.arange(start + 1, stop + 1))
    found = [blocks.first_duplicate(tmp_path / "ids" / f"ids-{k:02d}") for k in range(blocks.ID_PARTS)]
    opts = DataOptions(id_column="id")
    if len(set(ids)) == n:
        blocks.duplicate_error(found, path, opts)
        return
    with pytest.raises(DataError) as whole:
        load_eval_set(path, id_column="id")
    with pytest.raises(DataError) as parts:
        blocks.duplicate_error(found, path, opts)
    assert str(parts.value) == str(whole.value)


def test_run_finds_an_id_used_twice_across_blocks_as_in_process(local_ray, tiny_checkpoint, tmp_path, monkeypatch):
    from erroranalysis.sources import blocks

    monkeypatch.setattr(blocks, "HEAD_ROWS", 20)  # the driver checks 20 rows first; the workers find row 81
    rows = eval_rows(100)
    rows[80]["id"] = rows[7]["id"]
    data = write(tmp_path / "eval.csv", rows)
    opts, infer = DataOptions(id_column="id"), stages.InferParams(batch_size=8)
    with pytest.raises(DataError) as local:
        stages.run_checkpoint(tiny_checkpoint, data, tmp_path / "local", data_opts=opts, infer_opts=infer, after=AFTER)
    with pytest.raises(DataError) as distributed:
        stages.run_checkpoint(tiny_checkpoint, data, tmp_path / "ray", data_opts=opts, infer_opts=infer, after=AFTER,
                              engine=Engine("ray", concurrency=1))  # one actor: two are test_engines.py's case
    assert str(distributed.value) == str(local.value)
    assert "line 82, column 'id': duplicate id 'ex007' (first on line 9)" in str(local.value)
    assert Run(tmp_path / "ray").manifest["stages"]["infer"]["status"] == "failed"
    assert not (tmp_path / "ray" / "predictions.parquet").exists()
