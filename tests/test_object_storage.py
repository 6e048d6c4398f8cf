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

from erroranalysis.data import DataOptions
from erroranalysis.errors import DataError
from erroranalysis.stages import AfterParams, InferParams, run_checkpoint
from erroranalysis.storage import ObjectPath, is_url

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
