"""The Ray engine gives the in-process answers: a real local Ray (`ray.init(num_cpus=2)`), the real stages.

Predicted labels, metrics and clustering must be identical to the in-process run's, probabilities equal within
1e-5. A worker killed mid-run (retried by Ray, or the run ends failed, never looking complete) is tested on a
two-node cluster in tests/test_ray_cluster.py, workers that keep dying in tests/test_ray_failures.py.
"""

from __future__ import annotations

import contextlib
import sys

import numpy as np
import pytest
from conftest import eval_rows, write_jsonl

from erroranalysis.core.errors import ParameterError
from erroranalysis.engines import Engine, EngineError
from erroranalysis.engines.ray_data import check_coverage
from erroranalysis.rundir import formats, readers
from erroranalysis.sources.table import DataOptions
from erroranalysis.stages import AfterParams, InferParams, run_checkpoint

CHUNK = 40  # rows per chunk (and Ray block): several shards per actor on a small eval set


@pytest.fixture(autouse=True)
def _small_chunks(monkeypatch, tmp_path):
    import erroranalysis.stages.infer as infer_stage

    monkeypatch.setattr(infer_stage, "CHUNK_ROWS", CHUNK)
    monkeypatch.setenv("ERRORANALYSIS_CACHE_DIR", str(tmp_path / "cache"))


@contextlib.contextmanager
def ray_warnings():
    """The warnings Ray Data gives meanwhile, as Python warnings (its "the operator only received 1 input(s)" is
    one) or log records."""
    import logging
    import warnings

    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    handler, logger = Keep(logging.WARNING), logging.getLogger("ray.data")
    logger.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield seen
    finally:
        logger.removeHandler(handler)
        seen.extend(str(w.message) for w in caught)


def assert_same(a, b, where: str) -> None:
    """Equal structures; floats equal within 1e-6."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for key in a:
            assert_same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and not isinstance(b, str):
        assert b == pytest.approx(a, abs=1e-6, nan_ok=True), where
    else:
        assert a == b, where


def _run(checkpoint, data, out, engine: Engine, after: AfterParams):
    return run_checkpoint(checkpoint, data, out, data_opts=DataOptions(id_column="id"),
                          infer_opts=InferParams(batch_size=8, max_length=64), after=after, engine=engine)


@pytest.mark.slow
def test_ray_gives_the_in_process_answers(local_ray, tiny_checkpoint, tmp_path):
    data = write_jsonl(tmp_path / "eval.jsonl", eval_rows(240))
    after = AfterParams.with_seed(0, cluster_params={"layout": "pca"})
    local = _run(tiny_checkpoint, data, tmp_path / "local", Engine("local"), after)
    with ray_warnings() as warned:
        distributed = _run(tiny_checkpoint, data, tmp_path / "ray", Engine("ray"), after)
    assert not [w for w in warned if "only received" in w], warned  # every actor got blocks

    assert (distributed.path / "predictions.parquet").is_dir()  # shards, one per chunk
    # the JSONL eval set was read by the workers (through a Parquet copy, gone now), with the in-process record
    assert distributed.manifest["stages"]["infer"]["read_by"] == "workers"
    assert distributed.manifest["data"] == local.manifest["data"]
    assert not list(tmp_path.glob(".ray.rows-*"))
    block = Engine("ray").block_rows(240, 2, CHUNK)  # 2 actors, 4 blocks each at least: 30 rows, not 40
    assert len(list((distributed.path / "probs.npy").glob("part-*.npy"))) == 240 // block == 8
    a, b = local.predictions(), distributed.predictions()
    assert a.columns.tolist() == b.columns.tolist()
    assert a["example_id"].tolist() == b["example_id"].tolist()
    assert a["pred"].tolist() == b["pred"].tolist()
    for column in ("text", "label", "correct", "n_tokens", "truncated", "source", "stars"):
        assert a[column].tolist() == b[column].tolist(), column
    np.testing.assert_allclose(np.asarray(distributed.probs()), np.asarray(local.probs()), atol=1e-5)
    np.testing.assert_allclose(np.asarray(distributed.hidden_states()), np.asarray(local.hidden_states()),
                               atol=1e-4)
    ma, mb = local.metrics(), distributed.metrics()
    for key in ("overall", "per_class", "confusion", "top_confusions", "by_metadata"):
        assert_same(ma[key], mb[key], key)  # counts equal; a float from probabilities within 1e-6 (the batching
        # of a smaller block pads differently)
    infer = distributed.manifest["stages"]["infer"]
    assert infer["confusion_counts"] == ma["confusion"]["matrix"]  # summed on the workers, counted from rows
    assert infer["params"]["engine"] == "ray" and distributed.manifest["engine"] == {"engine": "ray"}
    assert infer["batching"] == local.manifest["stages"]["infer"]["batching"] == [[8, 0]]  # --batch-size 8 alone
    ca, cb = readers.read_assignments(local), readers.read_assignments(distributed)
    assert ca["cluster_id"].tolist() == cb["cluster_id"].tolist()
    assert readers.read_clusters(local)["name"].tolist() == readers.read_clusters(distributed)["name"].tolist()
    ka, kb = readers.read_checks(local), readers.read_checks(distributed)
    assert ka["duplicate_group"].tolist() == kb["duplicate_group"].tolist()
    assert ka["label_issue"].tolist() == kb["label_issue"].tolist()


def test_shards_must_cover_every_row(tmp_path):
    folders = [tmp_path / name for name in ("p", "q", "h")]
    for folder, suffix in zip(folders, (".parquet", ".npy", ".npy")):
        folder.mkdir()
        for start in (0, 10):
            (folder / f"part-{start:012d}{suffix}").write_bytes(b"x")
    check_coverage({0: 10, 10: 5}, 15, folders)
    with pytest.raises(EngineError, match="rows 10 to 19 of 30 came back from no worker"):
        check_coverage({0: 10, 20: 10}, 30, folders)
    with pytest.raises(EngineError, match="15 of 20 rows came back"):
        check_coverage({0: 10, 10: 5}, 20, folders)
    (folders[2] / "part-000000000010.npy").unlink()
    with pytest.raises(EngineError, match="lacks the shards of rows \\[10\\]"):
        check_coverage({0: 10, 10: 5}, 15, folders)


@pytest.mark.parametrize("command", ["run", "analyze"])
def test_without_ray_the_engine_says_how_to_install_it(monkeypatch, tiny_checkpoint, tmp_path, command):
    from test_cli_run import assert_user_error, invoke

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError, as without the extra
    rows = [{**r, "pred": r["label"]} for r in eval_rows(20)]
    data = write_jsonl(tmp_path / "eval.jsonl", rows)
    source = ["--model", tiny_checkpoint, "--data", data] if command == "run" else ["--predictions", data]
    result = invoke(command, *source, "--out", tmp_path / "run", "--engine", "ray")
    assert_user_error(result, r"--engine ray needs Ray Data, which is not installed; install it with: "
                              r"pip install 'erroranalysis-ml\[ray\]'")
    assert not (tmp_path / "run").exists()  # nothing half-written


def test_engine_parameters():
    with pytest.raises(ParameterError, match="engine='spark'"):
        Engine("spark")
    with pytest.raises(EngineError, match="--ray-address is only used with --engine ray"):
        Engine("local", "auto")


def test_blocks_give_every_actor_work():
    """Several blocks per actor at every size: Ray leaves an actor idle when it has fewer blocks than actors."""
    import pyarrow as pa

    from erroranalysis.engines.ray_data import plan

    engine = Engine("ray")
    assert engine.block_rows(3000, 2, 4096) == 375  # the sample: 8 blocks for 2 actors, not one of 3,000 rows
    assert engine.block_rows(1_000_000, 2, 4096) == 4096  # a large set keeps the in-process chunk
    assert Engine("ray", blocks_per_actor=1).block_rows(3000, 2, 4096) == 1500
    for rows, actors in ((1, 2), (5, 2), (3000, 2), (3001, 3), (10_000, 16)):
        blocks, used = plan(pa.table({"x": list(range(rows))}), engine, actors, 4096)
        assert sum(b.num_rows for b in blocks) == rows
        assert used == min(actors, rows) and len(blocks) >= min(rows, used * engine.blocks_per_actor)
    with pytest.raises(ParameterError, match="blocks_per_actor=0"):
        Engine("ray", blocks_per_actor=0)


@pytest.mark.slow
def test_minilm_on_ray_gives_the_in_process_vectors(local_ray, monkeypatch):
    """The checks' embedding for predictions brought with analyze: MiniLMEmbedder.__call__ on Ray actors."""
    from erroranalysis.embed.models import MiniLMEmbedder
    from erroranalysis.engines import ray_data

    texts = [r["text"] for r in eval_rows(90)]
    embedder = MiniLMEmbedder(cache=False)
    on_ray = ray_data.embed_texts(texts, embedder, Engine("ray", concurrency=1), chunk_size=CHUNK)  # 3 blocks
    np.testing.assert_allclose(on_ray, embedder.embed_texts(texts), atol=1e-5)


@pytest.mark.parametrize("dtype", ["float16", None])
@pytest.mark.parametrize("sharded", [False, True])
def test_sinks_keep_hidden_states_as_asked(tmp_path, dtype, sharded):
    """Step runs of a training run keep hidden states as float16 or not at all, on either engine."""
    import pyarrow as pa

    from erroranalysis.engines.sinks import FileSink, ShardSink

    paths = [tmp_path / "predictions.parquet", tmp_path / "probs.npy", tmp_path / "hidden_states.npy" if dtype else None]
    if sharded:
        for p in filter(None, paths):
            p.mkdir()
        sink = ShardSink(*paths, hidden_dtype=dtype or "float32")
    else:
        sink = FileSink(*paths, n_rows=6, hidden_dtype=dtype or "float32")
    rng = np.random.default_rng(0)
    hidden = rng.normal(size=(6, 4)).astype(np.float32)
    for start in (0, 3):
        out = {"probs": np.full((3, 2), 0.5, np.float32), "hidden": hidden[start:start + 3]}
        sink.write(start, pa.table({"example_id": [f"e{start + i}" for i in range(3)]}), out)
    sink.close()
    if dtype is None:
        assert sorted(p.name for p in tmp_path.iterdir()) == ["predictions.parquet", "probs.npy"]
        return
    kept = formats.npy(paths[2])
    assert kept.dtype == np.float16 and np.allclose(kept, hidden, atol=1e-2)
    if sharded:
        check_coverage({0: 3, 3: 3}, 6, paths)


def test_blocks_mapped_on_ray_give_the_in_process_results(local_ray, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    import test_blocks
    from ray import cloudpickle
    from test_blocks import _refuse_at, _sum

    from erroranalysis.core.errors import DataError
    from erroranalysis.engines import blocks

    cloudpickle.register_pickle_by_value(test_blocks)  # the workers cannot import a test module
    pq.write_table(pa.table({"x": np.arange(5000), "y": np.arange(5000) % 11}), tmp_path / "a.parquet",
                   row_group_size=700)
    here = blocks.map_blocks(_sum, tmp_path / "a.parquet", None, kwargs={"column": "y"}, rows_per_block=600,
                             ordered=True)
    there = blocks.map_blocks(_sum, tmp_path / "a.parquet", Engine("ray"), kwargs={"column": "y"},
                              rows_per_block=600, ordered=True)
    assert here == there and len(there) == 15  # seven row groups of 700 rows cut at 600, one of 100
    with pytest.raises(DataError, match="row 4321: not a label"):
        blocks.map_blocks(_refuse_at, tmp_path / "a.parquet", Engine("ray"), kwargs={"bad": 4321},
                          rows_per_block=600, ordered=True)
