"""A real two-node Ray cluster on this machine (`ray.cluster_utils.Cluster`, one CPU per node, so one actor on
each), with the eval set in Parquet on a local S3 server (moto, tests/object_store.py) that the workers read
themselves: the in-process answers; a bad value in a later block is the in-process one-line error and the stage
ends failed; a worker killed mid-run is retried or the run ends failed, never complete.

The cluster starts after the S3 server, so its nodes (and their workers) see the same AWS_* environment, as the
nodes of a real cluster are given theirs. The second node runs in a mount namespace where one folder of the driver's
(`driver_only`) is empty: the runs published to object storage keep their local mirror there, so a stage whose
workers needed the driver's disk would fail. Ray holds ~1.6 GB: this module starts one cluster for all its
tests."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import eval_rows, own_ray, write_jsonl
from object_store import objects, s3, upload  # noqa: F401 (s3: the fixture)
from test_checks_ray_train import leaky  # noqa: F401 (the fixture)
from test_contamination_ray import generation  # noqa: F401 (the fixture)
from test_engines import assert_same, ray_warnings

from erroranalysis.core import files
from erroranalysis.core.errors import DataError, RunError
from erroranalysis.engines import Engine, EngineError
from erroranalysis.rundir import Run, readers
from erroranalysis.sources.table import DataOptions
from erroranalysis.stages import AfterParams, InferParams, run_checkpoint

pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")
pytestmark = pytest.mark.slow

AFTER = AfterParams(checks=None, slices=None, cluster=None)
RAY = Path(sys.executable).parent / "ray"
BLIND: list = []  # the second node's process, when it is blind to `driver_only`


@pytest.fixture(scope="module")
def driver_only(tmp_path_factory):
    """A folder of this machine's that the cluster's second node does not see (`_blind_node`)."""
    return tmp_path_factory.mktemp("driver-only")


@pytest.fixture(scope="module")
def cluster(s3, driver_only):  # noqa: F811
    import ray
    from ray.cluster_utils import Cluster

    own_ray()
    nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    blind = _blind_node(nodes.address, driver_only)
    BLIND.clear()
    BLIND.extend([blind] if blind else [])
    if blind is None:
        nodes.add_node(num_cpus=1)
    ray.init(address=nodes.address, log_to_driver=False)
    deadline = time.monotonic() + 120
    while len([n for n in ray.nodes() if n["Alive"]]) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    if len([n for n in ray.nodes() if n["Alive"]]) < 2:
        pytest.fail("the cluster's second node did not join in 120 s")
    try:
        yield Engine("ray", address=nodes.address)
    finally:
        ray.shutdown()
        if blind is not None:
            os.killpg(blind.pid, signal.SIGTERM)
            blind.wait(timeout=60)
        nodes.shutdown()


def _blind_node(address: str, hidden) -> subprocess.Popen | None:
    """A second node, started in a mount namespace where `hidden` is an empty folder, as a node of a real cluster
    without the driver's disk sees it (None where this machine cannot make a mount namespace: a plain node then)."""
    if subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
        return None
    start = (f"mount -t tmpfs none {shlex.quote(str(hidden))} && exec {shlex.quote(str(RAY))} start "
             f"--address={address} --num-cpus=1 --block --disable-usage-stats")
    return subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c", start], start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.fixture
def on_driver_only(cluster, driver_only, tmp_path, monkeypatch):
    """The driver's cache (where a run on object storage keeps its local mirror) in the folder the second node does
    not see: a stage whose workers needed the mirror's disk would fail or answer wrong."""
    monkeypatch.setenv("ERRORANALYSIS_CACHE_DIR", str(driver_only / tmp_path.name))
    return driver_only


@pytest.fixture(autouse=True)
def _cache(monkeypatch, tmp_path):
    monkeypatch.setenv("ERRORANALYSIS_CACHE_DIR", str(tmp_path / "cache"))


def _run(checkpoint, data, out, engine: Engine):
    return run_checkpoint(checkpoint, data, out, data_opts=DataOptions(id_column="id"),
                          infer_opts=InferParams(batch_size=8, max_length=32), after=AFTER, engine=engine)


def _parquet(tmp_path, rows, name="eval.parquet"):
    path = tmp_path / name
    pd.DataFrame(rows).to_parquet(path, row_group_size=50)
    return path, upload(path, f"s3://evals/{tmp_path.name}/{name}")


@pytest.mark.parametrize("bad, says", [
    ({"label": "nonsense"}, r"eval.parquet, line 201, column 'label': label 'nonsense' is not one the model knows"),
])
def test_a_bad_value_in_a_later_block_is_the_in_process_error(cluster, tiny_checkpoint, tmp_path, monkeypatch,
                                                              bad, says):
    from erroranalysis.sources import blocks

    monkeypatch.setattr(blocks, "HEAD_ROWS", 20)  # the driver checks 20 rows first; a worker finds row 201
    rows = eval_rows(240)
    rows[200] = {**rows[200], **bad}
    local_file, url = _parquet(tmp_path, rows)
    with pytest.raises(DataError, match=says):
        _run(tiny_checkpoint, local_file, tmp_path / "local", Engine("local"))
    with pytest.raises(DataError, match=says) as caught:  # one actor is enough to find it (each loads torch)
        _run(tiny_checkpoint, url, tmp_path / "ray", Engine("ray", address=cluster.address, concurrency=1))
    assert len(str(caught.value).splitlines()) == 1


def _actors() -> list:
    """Our predictor's workers: descendants of this test process (the cluster's nodes are its children)."""
    found = []
    for proc in psutil.Process(os.getpid()).children(recursive=True):
        try:
            if "SourcePredictor" in " ".join(proc.cmdline()):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def test_a_worker_killed_mid_run_is_retried_or_the_run_fails(cluster, tiny_checkpoint, tmp_path):
    local_file, url = _parquet(tmp_path, eval_rows(1600))
    out, killed = tmp_path / "ray", []

    def kill_one_after_the_first_shard():
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not killed:
            shards = list(out.glob(".staging/infer-*/predictions.parquet/part-*.parquet"))
            workers = _actors()
            if shards and workers:
                os.kill(workers[0].pid, signal.SIGKILL)
                killed.append(len(shards))
            time.sleep(0.005)

    killer = threading.Thread(target=kill_one_after_the_first_shard, daemon=True)
    killer.start()
    try:
        run = _run(tiny_checkpoint, url, out, cluster)
    except EngineError:
        run = Run.open(out)
        assert run.stage_status("infer") == "failed"
        with pytest.raises(RunError):
            readers.read_predictions(run)
    else:
        local = _run(tiny_checkpoint, local_file, tmp_path / "local", Engine("local"))
        assert run.predictions()["pred"].tolist() == local.predictions()["pred"].tolist()
        np.testing.assert_allclose(np.asarray(run.probs()), np.asarray(local.probs()), atol=1e-5)
    killer.join()
    blocks = 1600 // cluster.block_rows(1600, 2, 4096)
    assert killed and killed[0] < blocks, "the worker was killed before the last shard was written"


def test_a_run_published_to_s3_has_its_shards_written_there_by_the_workers(cluster, tiny_checkpoint, tmp_path,
                                                                           monkeypatch, on_driver_only):
    """Two nodes read a Parquet eval set on S3 (each actor its blocks) and, with `--out s3://...` and every default
    stage, the workers write each per-row artifact's shards straight to object storage (the driver's mirror holds
    pointers, no shard), the stages after inference read them there, and the published run, fetched, holds the
    in-process answers; its artifacts pass the readers' checksums."""
    import ray

    from erroranalysis.core.storage import ObjectPath, fsspec_filesystem
    from erroranalysis.engines import blocks
    from erroranalysis.rundir import remote
    from erroranalysis.stages import CheckParams, ClusterParams

    monkeypatch.setattr(blocks, "ROWS_PER_BLOCK", 64)  # several blocks per stage
    after = AfterParams(checks=CheckParams(embedder="none"),
                        cluster=ClusterParams(reducer="pca", layout="pca", seed=3, embedder="hidden", max_fit=100))
    local_file, data_url = _parquet(tmp_path, eval_rows(480))
    url = f"s3://evals/runs/{tmp_path.name}"

    def run(data, out, engine):
        return run_checkpoint(tiny_checkpoint, data, out, data_opts=DataOptions(id_column="id"),
                              infer_opts=InferParams(batch_size=8, max_length=32), after=after, engine=engine)

    local = run(local_file, tmp_path / "local", Engine("local"))
    assert len([n for n in ray.nodes() if n["Alive"]]) == 2
    with ray_warnings() as warned:
        built = run(data_url, url, cluster)
    assert not [w for w in warned if "only received" in w], warned  # both actors got blocks
    sharded = ("predictions.parquet", "probs.npy", "hidden_states.npy", "checks.parquet", "slice_members.parquet",
               "assignments.parquet", "embeddings.npy")  # embeddings: the fit sample's, written by its worker
    mirror = remote.mirror_of(ObjectPath.parse(url))
    for name in sharded:
        assert sorted(p.name for p in (mirror / name).iterdir()) == ["shards.json"], name  # no shard on this disk
    listing = remote.remote_manifest(ObjectPath.parse(url))["objects"]
    keyed = {rel for rel, entry in listing["files"].items() if "key" in entry}
    assert {rel.split("/")[0] for rel in keyed} == set(sharded)
    assert all(entry["key"].startswith(f"objects/{listing['generation']}/shards/")
               for entry in listing["files"].values() if "key" in entry)
    infer = built.manifest["stages"]["infer"]
    assert infer["read_by"] == "workers" and infer["n_cut"] == 0
    data, here = built.manifest["data"], local.manifest["data"]
    assert data["path"] == data_url and (data["sha256"], data["rows"], data["n_cut"]) == (here["sha256"], 480, 0)
    assert data["metadata_columns"] == here["metadata_columns"]
    cluster_stage = built.manifest["stages"]["cluster"]
    assert cluster_stage["engine"]["placed_on_workers"] > 0  # fitted and placed by workers
    assert cluster_stage["embedder_key"] == local.manifest["stages"]["cluster"]["embedder_key"] is not None

    fetched = Run.open(remote.fetch(url, tmp_path / "fetched"))
    assert all(list((fetched.path / name).glob("part-*")) for name in sharded)
    assert len(list((fetched.path / "probs.npy").glob("part-*.npy"))) == 480 // cluster.block_rows(480, 2, 4096)
    a, b = local.predictions(), fetched.predictions()
    assert a.columns.tolist() == b.columns.tolist()
    for column in ("example_id", "text", "label", "pred", "correct", "n_tokens", "truncated", "source", "stars"):
        assert a[column].tolist() == b[column].tolist(), column
    np.testing.assert_allclose(np.asarray(fetched.probs()), np.asarray(local.probs()), atol=1e-5)
    for key in ("overall", "per_class", "confusion", "by_metadata"):
        assert_same(local.metrics()[key], fetched.metrics()[key], key)
    checks_a, checks_b = readers.read_checks(local), readers.read_checks(fetched)
    assert checks_a["example_id"].tolist() == checks_b["example_id"].tolist()
    assert readers.read_assignments(fetched)["example_id"].tolist() == \
        readers.read_assignments(local)["example_id"].tolist()
    # the driver's own mirror reads the shards where they are, as every reader does
    assert built.predictions()["pred"].tolist() == b["pred"].tolist()
    assert fsspec_filesystem("s3").find(f"{url}/objects/{listing['generation']}/shards")


def _nothing_left(url: str) -> None:
    """No run committed at `url`, and nothing left under it: no shard, no scratch."""
    from erroranalysis.core.storage import fsspec_filesystem

    s3fs = fsspec_filesystem("s3")
    s3fs.invalidate_cache()
    assert not s3fs.exists(f"{url}/manifest.json")
    assert s3fs.find(url) == []


def test_a_failed_stage_leaves_no_run_and_takes_its_shards_back(cluster, tiny_checkpoint, tmp_path, monkeypatch):
    """A bad value that a worker finds after others wrote their shards on object storage: the one-line error, no
    manifest at the URL, the stage's shards deleted."""
    from erroranalysis.sources import blocks

    monkeypatch.setattr(blocks, "HEAD_ROWS", 20)
    rows = eval_rows(240)
    rows[200] = {**rows[200], "label": "nonsense"}
    _, data_url = _parquet(tmp_path, rows)
    url = f"s3://evals/failed/{tmp_path.name}"
    with pytest.raises(DataError, match="line 201, column 'label'"):
        _run(tiny_checkpoint, data_url, url, Engine("ray", address=cluster.address, concurrency=1))
    _nothing_left(url)


def test_a_stage_failing_after_others_committed_leaves_no_shard(cluster, tiny_checkpoint, tmp_path, monkeypatch,
                                                            on_driver_only):
    """The infer stage commits its shards on object storage (a JSONL eval set there: a worker's Parquet copy of it
    in the bucket's scratch), then a later stage fails: the run is not published, and the generation's shards and
    the copy (named by no manifest) are deleted, not left in the bucket."""

    def broken(*args, **kwargs):
        raise RuntimeError("the metrics stage broke")

    monkeypatch.setattr("erroranalysis.stages.metrics.compute_run_metrics", broken)
    monkeypatch.setattr(files, "new_scratch", lambda *a: pytest.fail(f"a scratch folder on the driver's disk: {a}"))
    data_url = upload(write_jsonl(tmp_path / "eval.jsonl", eval_rows(120)), f"s3://evals/{tmp_path.name}/eval.jsonl")
    url = f"s3://evals/later/{tmp_path.name}"
    with pytest.raises(RuntimeError, match="the metrics stage broke"):
        _run(tiny_checkpoint, data_url, url, Engine("ray", address=cluster.address, concurrency=1))
    _nothing_left(url)


def test_a_token_run_reads_and_writes_s3_on_the_workers(cluster, tmp_path, monkeypatch, on_driver_only):
    """A token classifier's eval set and training file on object storage, the run published there: the workers read
    both in blocks (the driver reads neither whole) and write predictions, spans and hidden states straight to the
    bucket; fetched, the in-process run."""
    from token_fixtures import as_text_with_spans, build_tiny_token_classifier, write_sentences

    from erroranalysis.core.storage import ObjectPath
    from erroranalysis.engines import blocks
    from erroranalysis.rundir import remote
    from erroranalysis.stages import TokenParams, run_token_classification

    monkeypatch.setattr(blocks, "ROWS_PER_BLOCK", 16)
    model = build_tiny_token_classifier(tmp_path / "model")
    data = as_text_with_spans(write_sentences(tmp_path / "eval.jsonl", n=40), tmp_path / "eval.parquet")
    train = as_text_with_spans(write_sentences(tmp_path / "train.jsonl", n=30, seed=1), tmp_path / "train.parquet")
    urls = {name: upload(path, f"s3://evals/{tmp_path.name}/{path.name}") for name, path in
            (("data", data), ("train", train))}
    opts, tokens = DataOptions(id_column="id"), TokenParams(device="cpu", batch_size=8)
    here = run_token_classification(model, data, tmp_path / "local", data_opts=opts, token_opts=tokens, after=AFTER,
                                    train=train)

    def whole(*args, **kwargs):
        raise AssertionError("the driver read a file whole under --engine ray")

    monkeypatch.setattr("erroranalysis.stages.tokens.read_sentences", whole)
    url = f"s3://evals/token-runs/{tmp_path.name}"
    run_token_classification(model, urls["data"], url, data_opts=opts, token_opts=tokens, after=AFTER,
                             train=urls["train"], engine=Engine("ray", address=cluster.address, concurrency=1))
    mirror = remote.mirror_of(ObjectPath.parse(url))
    for name in ("predictions.parquet", "spans.parquet", "hidden_states.npy"):
        assert sorted(p.name for p in (mirror / name).iterdir()) == ["shards.json"], name
    there = Run.open(remote.fetch(url, tmp_path / "fetched"))
    assert there.state("infer")["read_by"] == "workers"  # raw text: the words and tags made on the workers
    assert there.manifest["data"] == {**here.manifest["data"], "path": urls["data"]}
    assert there.manifest["tokens"] == here.manifest["tokens"]
    a, b = readers.read_predictions(here), readers.read_predictions(there)
    assert len(a) == 40 and a["example_id"].tolist() == b["example_id"].tolist()
    assert a["pred_tags"].map(list).tolist() == b["pred_tags"].map(list).tolist()
    assert a["correct"].tolist() == b["correct"].tolist() and (~a["correct"]).any()
    np.testing.assert_allclose(a["loss"], b["loss"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(a["confidence"], b["confidence"], rtol=1e-4, atol=1e-5)
    sa, sb = readers.read_spans(here), readers.read_spans(there)
    pd.testing.assert_frame_equal(sa.drop(columns=["loss", "confidence"]), sb.drop(columns=["loss", "confidence"]))
    assert set(sb["seen_in_train"]) == {"seen", "unseen"}  # the training surfaces arrived, and not all match
    np.testing.assert_allclose(here.hidden_states(), there.hidden_states(), rtol=1e-4, atol=1e-5)
    assert here.metrics()["overall"] == there.metrics()["overall"]


def test_a_folder_a_node_does_not_see_fails_before_any_work(cluster, driver_only, tiny_checkpoint, tmp_path):
    """`engines.shared_disk.check_shared`: one task per node reads a token the driver wrote; the second node does not
    see `driver_only` (`_blind_node`), so a run there is refused in one line; a folder both see passes. A stage run
    alone on such a run (`metrics RUN --engine ray`, slices) is refused the same way, before any work."""
    from erroranalysis.engines import shared_disk
    from erroranalysis.stages import compute_run_metrics, slices_run

    if not BLIND:
        pytest.skip("this machine cannot make a mount namespace (unshare -m): no node here is blind to a folder")
    shared_disk.check_shared(tmp_path, cluster)  # both nodes see it
    assert not list(tmp_path.glob(".shared-disk-*"))  # the token is gone
    hidden = driver_only / tmp_path.name
    hidden.mkdir()
    with pytest.raises(EngineError, match=rf"node [0-9.]+ does not see {hidden}, where the workers write the "
                                          r"run's files; put the run directory on a filesystem every node shares, or "
                                          r"write the run to object storage \(--out s3://\.\.\.\)\."):
        shared_disk.check_shared(hidden, cluster)
    data = write_jsonl(tmp_path / "eval.jsonl", eval_rows(24))
    _run(tiny_checkpoint, data, hidden / "run", Engine("local"))  # in process: nothing is probed
    before = Run.open(hidden / "run").manifest["stages"]
    for stage in (lambda: compute_run_metrics(Run.open(hidden / "run"), engine=cluster),
                  lambda: slices_run(hidden / "run", engine=cluster)):
        with pytest.raises(EngineError, match=rf"node [0-9.]+ does not see {hidden / 'run'}, where the workers"):
            stage()
    assert Run.open(hidden / "run").manifest["stages"] == before


def test_a_run_built_on_s3_keeps_the_checks_scratch_there(cluster, on_driver_only, leaky, tmp_path,  # noqa: F811
                                                           monkeypatch):
    """`--out s3://...` under Ray with --train (a JSONL file: the workers' Parquet copy), the driver's mirror where
    the second node cannot see it: every scratch file the workers write and read back (key partitions, vectors, the
    training file's copy, ids, words and leaks) goes under the run's objects, none into the mirror; the answers are
    the in-process ones (tests/test_checks_ray_train.py's planted run)."""
    import contextlib
    import functools

    from ray import cloudpickle
    from test_checks_ray import word_vectors
    from test_checks_ray_train import ray_stated

    from erroranalysis import stages
    from erroranalysis.core import files, shards
    from erroranalysis.core.storage import ObjectPath
    from erroranalysis.rundir import remote
    from erroranalysis.rundir.readers import read_checks, read_checks_report
    from erroranalysis.stages import data_checks
    from erroranalysis.stages.data_checks import CheckParams, checks_run

    run_path, folder = leaky
    cloudpickle.register_pickle_by_value(sys.modules["test_checks_ray"])
    params = {"train": str(folder / "train.jsonl")}
    checks_run(run_path, CheckParams(**params), embed=word_vectors)
    frame, report = read_checks(Run.open(run_path)), read_checks_report(Run.open(run_path))

    monkeypatch.setattr("erroranalysis.engines.blocks.ROWS_PER_BLOCK", 256)  # three blocks
    monkeypatch.setattr(data_checks, "checks_run", functools.partial(checks_run, embed=word_vectors))
    monkeypatch.setattr(files, "new_scratch", lambda *a: pytest.fail(f"a scratch folder on this disk: {a}"))
    written: dict = {}
    scratch = shards.scratch

    @contextlib.contextmanager
    def recorded(prefix, name):
        with scratch(prefix, name) as at:
            yield at
            written[str(at)] = objects(at)  # before the block's end removes them

    monkeypatch.setattr(shards, "scratch", recorded)
    url = f"s3://evals/runs/{tmp_path.name}"
    built = stages.analyze("classification", folder / "preds.parquet", url,
                           stages.Reading(data=DataOptions(id_column="id")), engine=cluster,
                           after=AfterParams.with_seed(0, check_params=params, slices=False, cluster=False))

    ray_frame, ray_report = read_checks(built), read_checks_report(built)
    pd.testing.assert_frame_equal(frame, ray_frame)
    ray_stated(ray_report)
    assert ray_report == report
    (prefix, names), = ((p, n) for p, n in written.items() if "/.checks-scratch-" in p)  # not the id check's
    assert prefix.startswith(f"{url}/objects/scratch/.checks-scratch-")  # the run's, beside its generations
    assert {"train-rows.parquet", "train-words.pkl"} <= set(names)
    assert {"hashes", "vectors", "ref", "mixed", "assign", "firsts", "sample", "train-hashes", "train-words",
            "eval-words", "leak", "train-near", "train-domain", "eval-domain"} <= {n.split("/")[0] for n in names}
    assert not objects(ObjectPath.parse(prefix))  # removed at the end
    assert not list(remote.mirror_of(ObjectPath.parse(url)).glob(".checks-scratch-*"))


def test_a_run_built_on_object_storage_keeps_the_contamination_scratch_there(cluster, on_driver_only,
                                                                            generation, tmp_path,  # noqa: F811
                                                                            monkeypatch):
    """`analyze --task generation --out s3://... --engine ray --train s3://.../sft.jsonl`, the driver's mirror where
    the second node cannot see it: the in-process contamination answer (against the same file on disk); the imported
    predictions (written by the driver) are one shard in the bucket, and the scratch (the training file's Parquet
    copy, which a worker makes from the bucket, the partitions, the columns) lives under the run's objects there,
    removed at the end; no scratch is made on the driver's disk (tests/test_contamination_ray.py's planted run)."""
    import contextlib

    from test_contamination_ray import checked
    from typer.testing import CliRunner

    from erroranalysis.cli.app import app
    from erroranalysis.core import files, shards, storage
    from erroranalysis.rundir import remote

    root, train = generation
    frame, found = checked(root / "run", None, train=str(train))
    made, asked = {}, []
    real_scratch, real_new = shards.scratch, files.new_scratch

    @contextlib.contextmanager
    def recorded(prefix, name):
        with real_scratch(prefix, name) as folder:
            yield folder
            made[str(folder)] = {key.split("/")[0] for key in objects(folder)}  # what is in it, before it goes

    def new_scratch(parent, prefix):
        asked.append(prefix)
        return real_new(parent, prefix)

    monkeypatch.setattr(shards, "scratch", recorded)
    monkeypatch.setattr(files, "new_scratch", new_scratch)
    monkeypatch.setattr("erroranalysis.engines.blocks.ROWS_PER_BLOCK", 32)
    url, train_url = f"s3://evals/runs/{tmp_path.name}", upload(train, f"s3://evals/{tmp_path.name}/sft.jsonl")
    result = CliRunner().invoke(app, [str(a) for a in (
        "analyze", "--task", "generation", "--predictions", root / "outputs.jsonl", "--out", url, "--id-column", "id",
        "--output-checks", "exact", "--train", train_url, "--check-embedder", "none", "--no-cluster", "--no-slices",
        "--engine", "ray", "--ray-address", cluster.address)])
    assert result.exit_code == 0, result.output
    mirror = remote.mirror_of(storage.ObjectPath.parse(url))
    assert sorted(p.name for p in (mirror / "predictions.parquet").iterdir()) == ["shards.json"]
    run = Run.open(remote.fetch(url, tmp_path / "fetched"))
    pd.testing.assert_frame_equal(readers.read_checks(run), frame)
    section = readers.read_checks_report(run)["contamination"]
    assert section == {**found["contamination"], "train_path": train_url}
    assert readers.read_predictions(run)["example_id"].tolist() == \
        readers.read_predictions(Run.open(generation[0] / "run"))["example_id"].tolist()

    # one scratch, under the run's objects, holding the training file's copy and every step's folders; gone now
    ours = [folder for folder in made if folder.startswith(f"{url}/objects/scratch/.contamination-scratch-")]
    assert len(ours) == 1 and made[ours[0]] == {"rows.parquet", "train", "eval", "prompts", "bands", "candidates",
                                                "verified", "train_lengths", "hits", "columns"}
    assert objects(storage.ObjectPath.parse(ours[0])) == []
    assert not [p for p in asked if "contamination" in p or p.endswith(".rows-")]  # nothing on the driver's disk
