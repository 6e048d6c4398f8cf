"""Whether every node of a Ray cluster sees a folder of the driver's: the run directory, where the workers of a
distributed stage write their shards and scratch (id partitions, duplicate buckets, training state), unless the run
is built for object storage (`--out s3://...`: both go there, and nothing is probed).

A worker on a node that does not share the disk would write those files on its own disk, where the task that merges
them never looks: a silent wrong answer (fewer duplicates, say). So before such a stage starts, a token the driver
writes into the folder is read back by one task on each alive node (Ray's node-affinity scheduling), and the first
node that does not see it fails the command with one line. A local Ray (one node) is not probed.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path

from erroranalysis.core import files
from erroranalysis.engines import EngineError

_SEEN: set[tuple[str, str]] = set()  # (folder, cluster) already probed in this process
_NODES: dict = {}  # cluster -> (when asked, its alive nodes with CPUs)
NODES_TTL = 60.0


def check_shared(folder, engine) -> None:
    """Raise EngineError, before any work, unless every alive node of `engine`'s cluster sees `folder`."""
    if engine is None or not engine.distributed:
        return
    from erroranalysis.engines.ray_data import connect

    ray = connect(engine)
    nodes = _alive_nodes(ray)
    key = (str(Path(folder).resolve()), ray.get_runtime_context().gcs_address)
    if len(nodes) < 2 or key in _SEEN:
        return
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    token, content = Path(folder) / f".shared-disk-{secrets.token_hex(4)}", secrets.token_hex(16)
    write_token(token, content)
    try:
        task = ray.remote(read_token)
        seen = ray.get([task.options(num_cpus=0, max_retries=1, scheduling_strategy=NodeAffinitySchedulingStrategy(
            n["NodeID"], soft=False)).remote(str(token)) for n in nodes])
    finally:
        token.unlink(missing_ok=True)
    blind = [n["NodeManagerAddress"] for n, got in zip(nodes, seen) if got != content]
    if blind:
        raise EngineError(f"--engine ray: node {blind[0]} does not see {folder}, where the workers write the run's "
                          "files; put the run directory on a filesystem every node shares, or write the run to "
                          "object storage (--out s3://...).")
    _SEEN.add(key)


def _alive_nodes(ray) -> list[dict]:
    """The cluster's alive nodes with CPUs, asked of Ray's control store (`ray.nodes()`) at most every `NODES_TTL`
    seconds: every distributed stage probes, and the call once hung a test run in CI (cause not found)."""
    cluster, now = ray.get_runtime_context().gcs_address, time.monotonic()
    asked, nodes = _NODES.get(cluster, (0.0, None))
    if nodes is None or now - asked > NODES_TTL:
        nodes = [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0]
        _NODES[cluster] = (now, nodes)
    return nodes


def write_token(token: Path, content: str) -> None:
    files.write_text(token, content)


def read_token(token: str) -> str:
    """On a node: the token's content, or "" when this node does not see it."""
    try:
        return Path(token).read_text()
    except OSError:
        return ""
