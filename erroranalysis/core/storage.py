"""Object storage: eval sets and run directories at `s3://`, `gs://` and `az://` URLs, read and written through
`pyarrow.fs` (S3, GCS) or fsspec (Azure and any other protocol fsspec knows).

Credentials and endpoints come the standard way and never from the URL, so the manifest, which records the URL,
holds no secret: for S3 `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION`,
`AWS_ENDPOINT_URL` (an S3-compatible server: MinIO, Ceph, moto), `AWS_PROFILE`; for GCS the application default
credentials; for fsspec protocols fsspec's own configuration (`FSSPEC_<PROTOCOL>_<OPTION>` variables or
`~/.config/fsspec/*.json`). A URL with a user, password or query string is refused, since it would be recorded.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from erroranalysis.core.errors import DataError

ARROW_SCHEMES = ("s3", "gs", "gcs")  # pyarrow's own filesystems
FSSPEC_SCHEMES = ("az", "abfs", "abfss")  # through fsspec (adlfs)
SCHEMES = ARROW_SCHEMES + FSSPEC_SCHEMES
CREDENTIALS = ("the standard variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL for an "
               "S3-compatible server; Google's or fsspec's configuration for gs:// and az://)")


def is_url(value) -> bool:
    """Whether `value` names an object-storage location (a URL with a scheme this module reads)."""
    if isinstance(value, ObjectPath):
        return True
    return isinstance(value, str) and "://" in value and value.split("://", 1)[0].lower() in SCHEMES


@dataclass(frozen=True)
class ObjectPath:
    """An object (or prefix) in object storage. `url` is scheme://bucket/key with no secrets; str() is it."""

    url: str

    @classmethod
    def parse(cls, url: str) -> ObjectPath:
        parts = urlsplit(url)
        if parts.username or parts.password or parts.query or parts.fragment:
            raise DataError(f"{parts.scheme}://{parts.hostname or ''}{parts.path}: the URL carries credentials or "
                            f"options, which would be recorded in the manifest; give them through {CREDENTIALS} "
                            "and pass the plain URL.")
        if not parts.netloc:
            raise DataError(f"{url}: no bucket in the URL; write {parts.scheme}://BUCKET/KEY.")
        check_key(url, parts.path)
        return cls(f"{parts.scheme.lower()}://{parts.netloc}{parts.path}".rstrip("/"))

    def __str__(self) -> str:
        return self.url

    @property
    def scheme(self) -> str:
        return self.url.split("://", 1)[0]

    @property
    def key(self) -> str:
        """bucket/key, the path the filesystem takes."""
        return self.url.split("://", 1)[1]

    @property
    def name(self) -> str:
        return self.key.rsplit("/", 1)[-1]

    @property
    def suffix(self) -> str:
        name = self.name
        return name[name.rfind("."):] if "." in name.lstrip(".") else ""

    @property
    def parent(self) -> ObjectPath:
        return ObjectPath(self.url.rsplit("/", 1)[0])

    def __truediv__(self, name: str) -> ObjectPath:
        return ObjectPath(f"{self.url}/{name}")

    def resolve(self) -> ObjectPath:
        return self

    def filesystem(self):
        """(pyarrow filesystem, path in it)."""
        return filesystem(self.scheme), self.key

    # what the readers ask of a path, with failures as one line naming the URL
    def info(self):
        fs, key = self.filesystem()
        with errors(self):
            return fs.get_file_info(key)

    def exists(self) -> bool:
        import pyarrow.fs as pafs

        return self.info().type != pafs.FileType.NotFound

    def is_dir(self) -> bool:
        import pyarrow.fs as pafs

        return self.info().type == pafs.FileType.Directory

    def is_file(self) -> bool:
        import pyarrow.fs as pafs

        return self.info().type == pafs.FileType.File

    def size(self) -> int:
        return int(self.info().size or 0)

    def read_bytes(self) -> bytes:
        fs, key = self.filesystem()
        with errors(self):
            with fs.open_input_stream(key) as stream:
                return stream.read()

    def digest(self) -> dict:
        """{"sha256", "bytes"} of the object, streamed (constant memory)."""
        fs, key = self.filesystem()
        sha, size = hashlib.sha256(), 0
        with errors(self):
            with fs.open_input_stream(key) as stream:
                for block in iter(lambda: stream.read(1 << 22), b""):
                    sha.update(block)
                    size += len(block)
        return {"sha256": sha.hexdigest(), "bytes": size}


def check_key(url: str, key: str) -> None:
    """Refuse a key with a `.`, `..` or empty segment (one trailing `/` aside): object storage keeps such a key
    literally (`a/../b` is not `b`), so what is written there is never found at the path it seems to name."""
    segments = key.removeprefix("/").removesuffix("/").split("/") if key not in ("", "/") else []
    bad = next((s for s in segments if s in ("", ".", "..")), None)
    if bad is not None:
        what = "an empty segment ('//')" if bad == "" else f"a {bad!r} segment"
        raise DataError(f"{url}: the key has {what}, which object storage would keep literally; write the key "
                        "with plain names between single slashes (e.g. s3://BUCKET/runs/NAME).")


def digest(path) -> dict:
    """{"sha256", "bytes"} of a local file or folder (`files.digest`), or of an object."""
    from erroranalysis.core import files

    return path.digest() if isinstance(path, ObjectPath) else files.digest(path)


def read_parquet(path, columns=None):
    """A Parquet file, local or an object, as an Arrow table (only `columns` when given)."""
    import pyarrow.parquet as pq

    if isinstance(path, ObjectPath):
        fs, key = path.filesystem()
        with errors(path):
            return pq.read_table(key, filesystem=fs, columns=columns)
    return pq.read_table(path, columns=columns)


def mirror_of(url: ObjectPath) -> Path:
    """The local folder a run at `url` is built in (and fetched into): a cache, keyed by the URL."""
    from erroranalysis.core import files

    return files.cache_root() / "remote-runs" / hashlib.sha256(str(url).encode()).hexdigest()[:16]


def listing(prefix: ObjectPath) -> list[str]:
    """The names of the objects directly under `prefix` (none when nothing is there), listed afresh: fsspec caches
    listings, and workers add objects the driver has not seen."""
    import pyarrow.fs as pafs

    fs, key = prefix.filesystem()
    handler = getattr(fs, "handler", None)
    if handler is not None and hasattr(handler.fs, "invalidate_cache"):
        handler.fs.invalidate_cache(key)
    with errors(prefix):
        found = fs.get_file_info(pafs.FileSelector(key, allow_not_found=True))
    return [info.base_name for info in found if info.type == pafs.FileType.File]


def refuse_prefix(path) -> None:
    """A folder is read only from a local disk (a datasets save_to_disk folder); a prefix is refused."""
    if isinstance(path, ObjectPath):
        raise DataError(f"{path}: is a prefix, not an object; pass the URL of one .jsonl, .csv or .parquet object "
                        "(save_to_disk folders are read from a local disk).")


def missing(path: ObjectPath) -> str:
    """The one line for an object that is not there: whether its bucket is."""
    bucket = ObjectPath(f"{path.scheme}://{path.key.split('/', 1)[0]}")
    if not bucket.exists():
        return (f"{path}: no bucket {bucket.name!r} (or none these credentials may read); check the URL, and the "
                f"endpoint and credentials set through {CREDENTIALS}.")
    return f"{path}: no such object in {bucket}; check the key."


class errors:
    """A context in which an OSError from the filesystem becomes one DataError line naming the URL."""

    def __init__(self, where: ObjectPath | str):
        self.where = where

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if exc is not None and isinstance(exc, OSError) and not isinstance(exc, DataError):
            raise DataError(f"{self.where}: cannot reach it ({reason(exc)}); check the bucket and the key, and that "
                            f"credentials and endpoint are set through {CREDENTIALS}.") from None
        return False


def reason(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return (lines[0] if lines else type(exc).__name__)[:200]


def filesystem(scheme: str):
    """The pyarrow filesystem for `scheme`, configured from the environment (see the module's docstring): fsspec's
    implementation where it is installed (s3fs, gcsfs, adlfs), wrapped for pyarrow, else pyarrow's own. s3fs is
    preferred to pyarrow's S3 client, whose multipart uploads some S3-compatible servers (moto) reject."""
    import pyarrow.fs as pafs

    try:
        return pafs.PyFileSystem(pafs.FSSpecHandler(fsspec_filesystem(scheme)))
    except ImportError as exc:
        if scheme == "s3":
            return pafs.S3FileSystem(**s3_options())
        if scheme in ("gs", "gcs"):
            return pafs.GcsFileSystem()
        raise DataError(f"{scheme}:// needs an fsspec implementation (for az://: pip install adlfs), which is not "
                        f"installed ({reason(exc)}).") from None


def fsspec_filesystem(scheme: str):
    """fsspec's filesystem for `scheme`, made afresh when the environment that configures it changed (fsspec
    caches instances by their arguments alone, and a test's local server moves between ports)."""
    import fsspec

    key = (scheme, *(os.environ.get(name) for name in ENVIRONMENT))
    if key not in _made:
        protocol = {"gs": "gcs", "abfss": "abfs"}.get(scheme, scheme)
        try:
            _made[key] = fsspec.filesystem(protocol, skip_instance_cache=True)
        except ValueError as exc:  # a protocol fsspec does not know
            raise ImportError(reason(exc)) from None
    return _made[key]


ENVIRONMENT = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AWS_REGION")
_made: dict = {}


def s3_options() -> dict:
    """S3FileSystem options from the environment: pyarrow reads the AWS_* keys itself; AWS_ENDPOINT_URL[_S3] and
    the region are passed on (the endpoint with its scheme: http for a local server)."""
    options = {}
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        parts = urlsplit(endpoint)
        options = {"endpoint_override": parts.netloc or endpoint, "scheme": parts.scheme or "https"}
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region:
        options["region"] = region
    return options


def record_name(source) -> str:
    """How a record (a manifest, a report) names a source: a local path absolute, a URL as given (it holds no
    secret), an in-memory table by its name."""
    if isinstance(source, str) and not is_url(source):
        source = Path(source)
    return str(source.resolve()) if isinstance(source, Path) else str(source)


def as_location(value):
    """A URL as an ObjectPath, anything else unchanged."""
    if isinstance(value, str) and is_url(value):
        return ObjectPath.parse(value)
    return value
