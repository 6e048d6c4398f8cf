"""Eval sets on object storage: `--data s3://bucket/eval.parquet` against a local S3 server (moto in server mode
on 127.0.0.1, tests/object_store.py), read the standard way (AWS_ENDPOINT_URL, AWS_* keys). The same predictions
and metrics as the local file; the manifest records the URL and no secret; a bad bucket or key is one line, exit 2,
nothing written."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import eval_rows, write_jsonl
from object_store import KEY, SECRET, s3, upload  # noqa: F401 (s3: the fixture)

from erroranalysis.core.errors import DataError, RunError
from erroranalysis.core.storage import ObjectPath, is_url
from erroranalysis.sources.table import DataOptions
from erroranalysis.stages import AfterParams, InferParams, run_checkpoint

AFTER = AfterParams(checks=None, slices=None, cluster=None)


def _run(checkpoint, data, out):
    return run_checkpoint(checkpoint, data, out, data_opts=DataOptions(id_column="id"),
                          infer_opts=InferParams(batch_size=8, max_length=32), after=AFTER)


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_an_eval_set_on_s3_gives_the_local_answers(s3, tiny_checkpoint, tmp_path, suffix):
    local_file = tmp_path / f"eval{suffix}"
    if suffix == ".parquet":
        pd.DataFrame(eval_rows(50)).to_parquet(local_file)
    else:
        write_jsonl(local_file, eval_rows(50))
    url = upload(local_file, f"s3://evals/sets/eval{suffix}")
    local = _run(tiny_checkpoint, local_file, tmp_path / "local")
    remote = _run(tiny_checkpoint, url, tmp_path / "remote")

    a, b = local.predictions(), remote.predictions()
    pd.testing.assert_frame_equal(a, b)
    assert local.metrics()["overall"] == remote.metrics()["overall"]
    assert local.metrics()["per_class"] == remote.metrics()["per_class"]
    data = remote.manifest["data"]
    assert data["path"] == url and data["sha256"] == local.manifest["data"]["sha256"]
    text = (remote.path / "manifest.json").read_text()
    assert SECRET not in text and KEY not in text and "127.0.0.1" not in text  # no credential, no endpoint


@pytest.mark.parametrize("url, says", [
    ("s3://no-such-bucket/eval.parquet", r"s3://no-such-bucket/eval.parquet: no bucket 'no-such-bucket' .*AWS_"),
    ("s3://evals/missing.parquet", r"s3://evals/missing.parquet: no such object in s3://evals; check the key"),
])
def test_a_bad_bucket_or_key_is_one_line_exit_2(s3, tiny_checkpoint, tmp_path, url, says):
    from test_cli_run import assert_user_error, invoke

    out = tmp_path / "run"
    result = invoke("run", "--model", tiny_checkpoint, "--data", url, "--out", out, "--no-cluster")
    assert_user_error(result, says)
    assert not out.exists()


def test_a_url_that_carries_credentials_is_refused_without_echoing_them():
    with pytest.raises(DataError, match="carries credentials or options") as caught:
        ObjectPath.parse("s3://AKIAXXXX:topsecret@evals/eval.parquet")
    assert "topsecret" not in str(caught.value) and "AKIAXXXX" not in str(caught.value)
    with pytest.raises(DataError, match="carries credentials"):
        ObjectPath.parse("s3://evals/eval.parquet?access_key=x")
    assert is_url("s3://b/k") and is_url("gs://b/k") and not is_url("runs/s3:/x") and not is_url("/tmp/x")
    path = ObjectPath.parse("S3://evals/sets/eval.parquet/")
    assert (str(path), path.name, path.suffix, str(path.parent)) == (
        "s3://evals/sets/eval.parquet", "eval.parquet", ".parquet", "s3://evals/sets")
    assert json.dumps(str(path))  # what the manifest records


def test_a_run_published_to_s3_commits_with_its_manifest_and_is_fetched_whole(s3, tiny_checkpoint, tmp_path,
                                                                             monkeypatch):
    from test_cli_run import invoke

    from erroranalysis.core.storage import fsspec_filesystem
    from erroranalysis.rundir import Run, remote

    monkeypatch.setenv("ERRORANALYSIS_CACHE_DIR", str(tmp_path / "cache"))
    data = write_jsonl(tmp_path / "eval.jsonl", eval_rows(40))
    url = "s3://evals/runs/r1"
    args = ["run", "--model", tiny_checkpoint, "--data", data, "--id-column", "id", "--max-length", "32",
            "--batch-size", "8", "--no-cluster", "--no-data-checks", "--no-slices"]
    result = invoke(*args, "--out", url)
    assert result.exit_code == 0, result.output
    assert f"published to {url}" in result.stdout
    s3fs = fsspec_filesystem("s3")
    manifest = json.loads(s3fs.cat(f"{url}/manifest.json"))
    generation = manifest["objects"]["generation"]
    assert {"predictions.parquet", "probs.npy", "metrics.json"} <= set(manifest["objects"]["files"])
    assert s3fs.exists(f"{url}/objects/{generation}/predictions.parquet")
    assert SECRET not in json.dumps(manifest) and KEY not in json.dumps(manifest)

    local = _run(tiny_checkpoint, data, tmp_path / "local")
    fetched = Run.open(remote.fetch(url, tmp_path / "fetched"))
    pd.testing.assert_frame_equal(fetched.predictions(), local.predictions())
    assert fetched.metrics()["overall"] == local.metrics()["overall"]

    # what the manifest does not name is ignored: a half-published generation, a stray file
    s3fs.pipe(f"{url}/objects/99990101T000000-dead/predictions.parquet", b"not parquet")
    s3fs.pipe(f"{url}/objects/{generation}/stray.txt", b"x")
    again = remote.fetch(url, tmp_path / "again")
    assert not (again / "stray.txt").exists()
    pd.testing.assert_frame_equal(Run.open(again).predictions(), local.predictions())
    shown = invoke("show", url, "--json")  # read-only commands take the URL: fetched into its mirror
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["metrics"]["overall"] == local.metrics()["overall"]

    refused = invoke(*args, "--out", url)
    assert refused.exit_code == 2 and "a run already exists here; pass --overwrite" in refused.stderr
    replaced = invoke(*args, "--out", url, "--overwrite")
    assert replaced.exit_code == 0, replaced.output
    newer = json.loads(s3fs.cat(f"{url}/manifest.json"))
    assert newer["objects"]["generation"] != generation and newer["run_id"] == manifest["run_id"]
    assert not s3fs.exists(f"{url}/objects/{generation}/predictions.parquet")  # the superseded generation


@pytest.mark.parametrize("name", ["../outside.txt", "/etc/passwd", "a/../../b"])
def test_a_manifest_that_names_a_path_outside_the_run_is_refused_on_fetch(s3, tmp_path, name):
    from erroranalysis.core.storage import fsspec_filesystem
    from erroranalysis.rundir import remote
    from erroranalysis.rundir.confine import OutsideError

    url = f"s3://evals/bad/{abs(hash(name))}"
    fsspec_filesystem("s3").pipe(f"{url}/manifest.json", json.dumps(
        {"objects": {"generation": "g1", "files": {name: {"sha256": "0" * 64}}}}).encode())
    with pytest.raises(OutsideError, match="leads out of it|absolute path"):
        remote.fetch(url, tmp_path / "fetched")
    assert not (tmp_path / "outside.txt").exists()


@pytest.mark.parametrize("url, says", [
    ("s3://evals/runs/a/../../b", r"s3://evals/runs/a/\.\./\.\./b: the key has a '\.\.' segment"),
    ("s3://evals/../other/x", r"s3://evals/\.\./other/x: the key has a '\.\.' segment"),
    ("s3://evals//runs///d/", r"s3://evals//runs///d/: the key has an empty segment"),
])
def test_an_out_url_with_dot_dot_or_empty_segments_is_refused_before_anything_is_written(s3, tiny_checkpoint, tmp_path,
                                                                                        monkeypatch, url, says):
    """Object storage would keep `a/../../b` literally, so `show s3://evals/b` would then find no run: refused in one
    line, exit 2; no object and no mirror written."""
    from test_cli_run import assert_user_error, invoke

    from erroranalysis.core.storage import fsspec_filesystem

    monkeypatch.setenv("ERRORANALYSIS_CACHE_DIR", str(tmp_path / "cache"))
    before = set(fsspec_filesystem("s3").find("evals"))
    data = write_jsonl(tmp_path / "eval.jsonl", eval_rows(20))
    result = invoke("run", "--model", tiny_checkpoint, "--data", data, "--id-column", "id", "--out", url)
    assert_user_error(result, says)
    assert set(fsspec_filesystem("s3").find("evals")) == before
    assert not (tmp_path / "cache").exists()
    assert str(ObjectPath.parse("s3://evals/runs/d/")) == "s3://evals/runs/d"  # one trailing slash is a prefix's


def _published(tmp_path, url):
    """A run (the real infer-stage commit, fake predictions) published to `url`; its manifest as stored."""
    from fake_runs import inferred_run

    from erroranalysis.rundir import remote

    frame = pd.DataFrame({"example_id": [f"e{i}" for i in range(8)], "text": ["t"] * 8, "label": ["a", "b"] * 4,
                          "pred": ["a"] * 8})
    return remote.publish(inferred_run(tmp_path / "built", frame, labels=["a", "b"]).path, ObjectPath.parse(url))


def _tree(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("hostile, says", [
    ("../outside.txt", r"file '\.\./outside\.txt' leads out of it"),
    (".lock", r"names '\.lock', which is not a run file and never belongs in a mirror"),
    (".staging/infer-1/predictions.parquet", r"names '\.staging/infer-1/predictions\.parquet', which is not a run"),
    ("metrics.json/x", r"names 'metrics\.json' as a file and 'metrics\.json/x' inside it"),
])
def test_a_hostile_name_listed_after_good_ones_leaves_the_mirror_as_it_was(s3, tmp_path, monkeypatch, hostile,
                                                                          says):
    """The whole object list is checked before the first download and the run is fetched into a fresh folder that
    trades places with the mirror: a refused listing adds nothing beside the old mirror, one line, exit 2."""
    from test_cli_run import assert_user_error, invoke

    from erroranalysis.core.storage import fsspec_filesystem
    from erroranalysis.rundir import remote

    monkeypatch.setenv("ERRORANALYSIS_CACHE_DIR", str(tmp_path / "cache"))
    url = f"s3://evals/hostile/{abs(hash(hostile))}"
    manifest = _published(tmp_path, url)
    mirror = remote.fetch(url)
    old = _tree(mirror)
    s3fs = fsspec_filesystem("s3")
    generation = manifest["objects"]["generation"]
    s3fs.pipe(f"{url}/objects/{generation}/added.txt", b"new")  # a good new file listed before the hostile one
    files = dict(manifest["objects"]["files"])
    files["added.txt"] = {"sha256": __import__("hashlib").sha256(b"new").hexdigest(), "bytes": 3}
    files.setdefault("metrics.json", {"sha256": "0" * 64, "bytes": 1})
    files[hostile] = {"sha256": "0" * 64, "bytes": 1}
    s3fs.pipe(f"{url}/manifest.json", json.dumps({**manifest, "objects": {"generation": generation,
                                                                          "files": files}}).encode())
    result = invoke("show", url)
    assert_user_error(result, says)
    assert "nothing was changed" in result.stderr
    assert _tree(mirror) == old and not (tmp_path / "cache" / "outside.txt").exists()
    assert [p.name for p in mirror.parent.iterdir()] == [mirror.name]  # no fresh folder left beside it


def test_a_fetch_that_fails_half_way_leaves_the_old_mirror_and_a_good_one_replaces_it(s3, tmp_path, monkeypatch):
    from erroranalysis.core.errors import RunError
    from erroranalysis.core.storage import fsspec_filesystem
    from erroranalysis.rundir import Run, remote

    monkeypatch.setenv("ERRORANALYSIS_CACHE_DIR", str(tmp_path / "cache"))
    url = "s3://evals/halfway/r"
    manifest = _published(tmp_path, url)
    mirror = remote.fetch(url)
    old = _tree(mirror)
    s3fs = fsspec_filesystem("s3")
    generation = manifest["objects"]["generation"]
    last = sorted(manifest["objects"]["files"])[-1]
    real = s3fs.cat(f"{url}/objects/{generation}/{last}")
    s3fs.pipe(f"{url}/objects/{generation}/{last}", b"tampered")  # fails its sha256 after the others are fetched
    with pytest.raises(RunError, match="does not match the manifest"):
        remote.fetch(url)
    assert _tree(mirror) == old and [p.name for p in mirror.parent.iterdir()] == [mirror.name]
    s3fs.pipe(f"{url}/objects/{generation}/{last}", real)
    (mirror / "stale.txt").write_text("left by an older fetch")
    assert remote.fetch(url) == mirror and not (mirror / "stale.txt").exists()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("a folder of the user's, not a run")
    with pytest.raises(RunError, match="holds files but no run, which the fetch would replace"):
        remote.fetch(url, tmp_path / "mine")
    assert [p.name for p in (tmp_path / "mine").iterdir()] == ["notes.txt"]
    assert Run.open(mirror).predictions()["example_id"].tolist() == [f"e{i}" for i in range(8)]


def test_shards_written_on_s3_are_read_through_their_pointer_as_local_shards_are(s3, tmp_path, monkeypatch):
    """`core.shards`: shards a worker writes to object storage (out of order, one PUT each, with a digest), sealed
    into a pointer in the run's local mirror, read by every reader as the same shards on a local disk: blocks across
    shard bounds, array rows, whole tables, rows by id. A pointer outside its run's mirror is refused."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    from erroranalysis.core import files, shards
    from erroranalysis.core.storage import fsspec_filesystem, mirror_of
    from erroranalysis.engines import blocks
    from erroranalysis.rundir import formats

    monkeypatch.setenv("ERRORANALYSIS_CACHE_DIR", str(tmp_path / "cache"))
    run_url = f"s3://evals/shards/{tmp_path.name}"
    prefix = f"{run_url}/objects/g1/shards/infer-1"
    local_tree, pointed = tmp_path / "local", mirror_of(ObjectPath.parse(run_url))
    rows = [(0, 5), (5, 7), (12, 4)]
    vectors = np.arange(16 * 3, dtype=np.float32).reshape(16, 3)
    for start, n in reversed(rows):  # in any order, as workers finish
        ids = list(range(start, start + n))
        table = pa.table({"example_id": [f"e{i}" for i in ids], "row": ids})
        for where in (f"{prefix}/t", local_tree / "t"):
            shards.write(where, f"part-{start:012d}.parquet", lambda p, t=table: pq.write_table(t, p))
        for where in (f"{prefix}/v", local_tree / "v"):
            shards.write(where, f"part-{start:012d}.npy", files.npy_writer(vectors[start:start + n]))
    assert shards.names(f"{prefix}/t", ".parquet") == [f"part-{s:012d}.parquet" for s, _ in rows]
    assert shards.seal(f"{prefix}/t", pointed / "t") and shards.seal(f"{prefix}/v", pointed / "v")
    assert sorted(p.name for p in (pointed / "t").iterdir()) == ["shards.json"]
    assert not shards.seal(f"{prefix}/nothing", pointed / "none") and not (pointed / "none").exists()

    for cut in (3, 6, 100):
        got = [(b.start, b.rows, blocks.read(b).column("row").to_pylist()) for b in blocks.plan(pointed / "t", cut)]
        assert got == [(b.start, b.rows, blocks.read(b).column("row").to_pylist())
                       for b in blocks.plan(local_tree / "t", cut)]
        for block in blocks.plan(pointed / "t", cut):
            np.testing.assert_array_equal(blocks.read_npy_rows(pointed / "v", block), vectors[block.start:block.stop])
    assert formats.parquet(pointed / "t")["row"].tolist() == list(range(16))
    np.testing.assert_array_equal(formats.npy(pointed / "v"), vectors)
    ids = shards.dataset(pointed / "t").to_table(filter=ds.field("row") > 13)
    assert ids.column("example_id").to_pylist() == ["e14", "e15"]

    copied = tmp_path / "copied" / "t"  # the same pointer in a run folder that is not this URL's mirror
    copied.mkdir(parents=True)
    (copied / "shards.json").write_bytes((pointed / "t" / "shards.json").read_bytes())
    with pytest.raises(RunError, match=r"copied/t/shards\.json: names shards at s3://evals/shards/.*, which is not "
                                       r"this run's"):
        formats.parquet(copied)
    fsspec_filesystem("s3").rm(f"{prefix}/t/part-{5:012d}.parquet.digest")
    with pytest.raises(RunError, match=r"part-000000000005\.parquet: written without its digest"):
        shards.seal(f"{prefix}/t", tmp_path / "again")
    (pointed / "t" / "shards.json").write_text(f'{{"url": "{prefix}/t", "shards": {{"../up": {{"sha256": "0"}}}}}}')
    with pytest.raises(RunError, match=r"shards\.json: not a readable shard pointer"):
        blocks.plan(pointed / "t")


def test_a_listing_key_outside_its_generation_shards_is_refused_before_any_download(s3, tmp_path, monkeypatch):
    from erroranalysis.core.storage import fsspec_filesystem
    from erroranalysis.rundir import remote

    monkeypatch.setenv("ERRORANALYSIS_CACHE_DIR", str(tmp_path / "cache"))
    url = f"s3://evals/keyed/{tmp_path.name}"
    manifest = _published(tmp_path, url)
    generation = manifest["objects"]["generation"]
    listed = dict(manifest["objects"]["files"])
    listed["predictions.parquet/part-000000000000.parquet"] = {"sha256": "0" * 64, "bytes": 1,
                                                               "key": "objects/other-generation/shards/x.parquet"}
    fsspec_filesystem("s3").pipe(f"{url}/manifest.json", json.dumps(
        {**manifest, "objects": {"generation": generation, "files": listed}}).encode())
    with pytest.raises(RunError, match=r"gives 'predictions\.parquet/part-000000000000\.parquet' the key "
                                       r"'objects/other-generation/shards/x\.parquet', which is not in its "
                                       r"generation's shards"):
        remote.fetch(url, tmp_path / "fetched")
    assert not (tmp_path / "fetched").exists()


def test_scratch_on_s3_is_removed_and_a_killed_process_s_is_swept_by_the_next(s3, tmp_path):  # noqa: F811
    """`core.shards.scratch`: what a stage's workers read back from one another, under `URL/objects/scratch/`; gone
    when the block ends, even on an error; one that a process of this host left when it was killed (its pid gone)
    is deleted by the next, another host's or a live process's is kept."""
    import os
    import subprocess

    from object_store import objects

    from erroranalysis.core import files, shards
    from erroranalysis.core.storage import ObjectPath

    url = ObjectPath.parse(f"s3://evals/scratch/{tmp_path.name}/objects")
    dead = subprocess.Popen(["true"])
    dead.wait()  # a pid no process has now
    stem = files.scratch_stem(".x-")
    left = {name: url / "scratch" / name for name in (stem.replace(str(os.getpid()), str(dead.pid)) + "aa",
                                                      stem + "bb", ".x-otherhost-1-cc")}
    for folder in left.values():
        shards.write_file(folder / "part-0.npy", lambda p: p.write_bytes(b"left"))
    with pytest.raises(RuntimeError, match="the stage broke"), shards.scratch(url, ".x-") as folder:
        shards.write_file(folder / "ids-00" / "part-0.parquet", lambda p: p.write_bytes(b"rows"))
        assert objects(folder) == ["ids-00/part-0.parquet"]
        raise RuntimeError("the stage broke")
    assert not objects(folder)
    kept = {name for name, at in left.items() if objects(at)}
    assert kept == {stem + "bb", ".x-otherhost-1-cc"}


WRITER = """
import sys, time
from erroranalysis.core import shards
from erroranalysis.rundir import commit, create_run

with create_run(sys.argv[1], overwrite=True, task="classification", labels=["a", "b"]) as run:
    # as a worker writes a shard under the run's generation
    shards.write_file(commit.SHARDS_AT[run.path.resolve()] / "predictions" / "part-0.parquet",
                      lambda p: p.write_bytes(b"rows"))
    if sys.argv[2] == "killed":  # and the process is killed before the commit
        print("written", flush=True)
        time.sleep(120)
"""


def test_a_killed_run_s_generation_is_swept_by_the_next_run_the_committed_one_kept(s3, tmp_path):  # noqa: F811
    """A run at a URL killed before its commit leaves its generation (the shards its workers wrote) named by no
    manifest. The next run written there from this host deletes it; the committed generation (its process gone
    too), a live process's and another host's are kept, and the committed run still reads."""
    import signal
    import subprocess
    import sys

    from object_store import objects

    from erroranalysis.core import files, shards
    from erroranalysis.rundir import Run, create_run, remote

    url = f"s3://evals/sweep/{tmp_path.name}"

    def writer(mode: str) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", WRITER, url, mode], stdout=subprocess.PIPE, text=True)
        if mode == "killed":
            assert proc.stdout.readline().strip() == "written"
        return proc

    assert writer("commit").wait(timeout=120) == 0
    committed = remote.remote_manifest(shards.location(url))["objects"]["generation"]
    killed = writer("killed")
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    planted = (files.scratch_stem(remote.GENERATION) + "20260101T000000-aa",  # a live process's (this one's)
               "gen-otherhost-1-20260101T000000-bb", "20260101T000000-cc")  # another host's; an older name
    for name in planted:
        shards.write_file(shards.location(url) / "objects" / name / "x", lambda p: p.write_bytes(b"x"))
    before = {name.split("/")[0] for name in objects(shards.location(url) / "objects")}
    assert len(before) == 5 and committed in before
    with pytest.raises(RuntimeError, match="stopped"), create_run(url, overwrite=True, task="classification",
                                                                  labels=["a", "b"]):
        raise RuntimeError("stopped")  # a failed run: nothing of its own is left, no commit
    after = {name.split("/")[0] for name in objects(shards.location(url) / "objects")}
    assert after == {committed, *planted}
    assert Run.open(remote.fetch(url, tmp_path / "fetched")).labels == ["a", "b"]


def test_a_training_file_on_s3_is_read_from_there_by_the_command_line(s3, tiny_checkpoint, tmp_path):  # noqa: F811
    """`data-checks RUN --train s3://...`: the classifier's leakage and a generation run's contamination against a
    training file on object storage are those against the same file on disk (the command line once folded the URL
    into `s3:/...`, "no such file"); the stage records the URL as given."""
    from test_cli_run import invoke
    from test_contamination_ray import planted_generation

    from erroranalysis.rundir import Run, readers

    rows = eval_rows(60)
    data = write_jsonl(tmp_path / "eval.jsonl", rows)
    train = write_jsonl(tmp_path / "train.jsonl", rows[:12] + eval_rows(90)[60:])  # 12 eval rows leak
    made = invoke("run", "--model", tiny_checkpoint, "--data", data, "--id-column", "id", "--max-length", "32",
                  "--out", tmp_path / "run", "--no-cluster", "--no-slices", "--no-data-checks")
    assert made.exit_code == 0, made.output
    (tmp_path / "generation").mkdir()
    root, sft = planted_generation(tmp_path / "generation")
    for run_path, local in ((tmp_path / "run", train), (root / "run", sft)):
        url = upload(local, f"s3://evals/{tmp_path.name}/{local.name}")
        found = {}
        for given in (local, url):
            done = invoke("data-checks", run_path, "--train", given, "--check-embedder", "none")
            assert done.exit_code == 0, done.output
            run = Run.open(run_path)
            found[str(given)] = (readers.read_checks(run), readers.read_checks_report(run))
            assert run.manifest["stages"]["checks"]["params"]["train"] == (str(local.resolve()) if given == local
                                                                             else url)
        (frame, report), (frame_s3, report_s3) = found.values()
        pd.testing.assert_frame_equal(frame, frame_s3)
        assert frame["in_train"].sum() == (12 if run_path == tmp_path / "run" else 25)  # what was planted
        section = "leakage" if run_path == tmp_path / "run" else "contamination"
        assert {**report[section], "train_path": None} == {**report_s3[section], "train_path": None}
        assert (report[section]["train_path"], report_s3[section]["train_path"]) == (str(local.resolve()), url)


def test_doctor_overfit_and_sft_check_read_their_files_on_s3(s3, tmp_path):  # noqa: F811
    """`doctor --task generation --data s3://... --train s3://...`: the memorization step, the generation run and
    the contamination check all read the files from the bucket (the memorization step once folded the URL into
    `s3:/...`), and the run names them as given; `overfit --task generation` and `sft-check` take `--data s3://...`
    (their `--data` was a path on the command line)."""
    from test_cli_run import invoke
    from test_generation import build_tiny_causal_lm
    from test_overfit_lm import sft_rows

    from erroranalysis.core.files import digest
    from erroranalysis.rundir import Run

    model = build_tiny_causal_lm(tmp_path / "lm")
    sft = upload(write_jsonl(tmp_path / "sft.jsonl", sft_rows()), f"s3://evals/{tmp_path.name}/sft.jsonl")
    prompts = upload(write_jsonl(tmp_path / "prompts.jsonl", [{"id": f"p{i}", "prompt": f"Say {i}.",
                                                              "reference": "fox"} for i in range(4)]),
                     f"s3://evals/{tmp_path.name}/prompts.jsonl")
    out = invoke("doctor", "--task", "generation", "--model", model, "--data", prompts, "--id-column", "id",
                 "--train", sft, "--out", tmp_path / "doc", "--n", "8", "--steps", "2", "--no-control", "--device",
                 "cpu", "--max-new-tokens", "4", "--output-checks", "exact", "--check-embedder", "none", "--json")
    assert out.exit_code == 0, out.output
    keys = [s["key"] for s in json.loads(out.stdout)["sections"]]
    assert keys[0] == "memorize" and "labels" in keys
    assert Run.open(tmp_path / "doc").state("doctor")["params"]["train"] == sft
    assert Run.open(tmp_path / "doc").manifest["data"]["path"] == prompts

    overfit = invoke("overfit", "--task", "generation", "--model", model, "--data", sft, "--n", "8", "--steps", "2",
                     "--no-control", "--device", "cpu", "--json")
    assert overfit.exit_code == 0, overfit.output
    assert json.loads(overfit.stdout)["n"] == 8
    checked = invoke("sft-check", "--model", model, "--data", sft, "--out", tmp_path / "sft", "--json")
    assert checked.exit_code == 0, checked.output
    data = Run.open(tmp_path / "sft").manifest["data"]
    assert (data["path"], data["sha256"]) == (sft, digest(tmp_path / "sft.jsonl")["sha256"])


def test_an_openai_batch_output_and_its_requests_on_s3_give_the_local_run(s3, tmp_path):  # noqa: F811
    """`analyze --task generation -p s3://.../batch_output.jsonl --requests s3://.../batch_input.jsonl`: both read
    from the bucket (`--requests` was opened as a local path), the run that of the same files on disk."""
    from test_generation_sources import analyzed, batch_files

    requests, outputs = batch_files(tmp_path)
    urls = [upload(path, f"s3://evals/{tmp_path.name}/{path.name}") for path in (requests, outputs)]
    local, there = analyzed(tmp_path, outputs, "--requests", requests), analyzed(
        tmp_path, urls[1], "--requests", urls[0], name="s3")
    pd.testing.assert_frame_equal(local[1], there[1])
    assert there[0].manifest["data"]["path"] == urls[1] and there[0].manifest["data"]["source_format"] == "openai-batch"
