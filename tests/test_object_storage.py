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

from erroranalysis.core.errors import DataError
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
