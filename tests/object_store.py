"""A local S3 server for tests: moto in server mode on 127.0.0.1, on a free port, reached as a real S3 endpoint is
(AWS_ENDPOINT_URL and dummy AWS_* keys in the environment). `moto` is a test extra; tests skip without it."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from contextlib import contextmanager

import pytest

KEY, SECRET = "testing-key-id", "testing-secret-key-do-not-record"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def moto_server():
    """Start `moto_server -H 127.0.0.1 -p PORT`; yield the environment that points S3 clients at it."""
    port = free_port()
    command = [shutil.which("moto_server") or "", "-H", "127.0.0.1", "-p", str(port)]
    if not command[0]:
        command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto_server did not start on port {port}") from None
                time.sleep(0.1)
        yield {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": KEY,
               "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def make_bucket(name: str) -> None:
    """Create a bucket on the server the environment names."""
    from erroranalysis.core.storage import fsspec_filesystem

    fsspec_filesystem("s3").mkdir(name)


def upload(local, url: str) -> str:
    """Copy a local file to s3://bucket/key; return the URL."""
    from erroranalysis.core.storage import fsspec_filesystem

    fsspec_filesystem("s3").put_file(str(local), url)
    return url


def objects(prefix) -> list[str]:
    """The keys of every object under `prefix` (an ObjectPath), relative to it, listed afresh."""
    import pyarrow.fs as pafs

    fs, key = prefix.filesystem()
    found = fs.get_file_info(pafs.FileSelector(key, recursive=True, allow_not_found=True))
    return [i.path[len(key) + 1:] for i in found if i.type == pafs.FileType.File]


@pytest.fixture(scope="module")
def s3():
    """A local S3 server for the module, with a bucket `evals`; the environment points clients at it."""
    pytest.importorskip("moto.server")
    with moto_server() as env, pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        make_bucket("evals")
        yield env
