"""Reading back what a tracker recorded, with the tracker's own readers where it has one: MLflow's client over a
file store, TensorBoard's EventAccumulator; W&B (0.31 reads its transaction log in Go only) through its protobuf
records, read from the `.wandb` file's LevelDB-style log blocks."""

from __future__ import annotations

import struct
from pathlib import Path

BLOCK = 32768  # W&B's transaction log: LevelDB log format, 32 KiB blocks, 7-byte record headers
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def mlflow_runs(store: Path, experiment: str = "erroranalysis") -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=store.as_uri())
    found = client.get_experiment_by_name(experiment)
    return client.search_runs([found.experiment_id]) if found else []


def mlflow_artifacts(store: Path, run_id: str, folder: str | None = None) -> list[str]:
    from mlflow.tracking import MlflowClient

    return [a.path for a in MlflowClient(tracking_uri=store.as_uri()).list_artifacts(run_id, folder)]


def wandb_records(path: Path):
    """The protobuf records of a run's `.wandb` file."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path}: not a W&B transaction log"
    pos, chunks = 7, []
    while pos + 7 <= len(data):
        left = BLOCK - pos % BLOCK
        if left < 7:  # a block's tail too short for a header is padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if length == 0 and kind == 0:
            pos += left
            continue
        chunks.append(data[pos + 7:pos + 7 + length])
        pos += 7 + length
        if kind in (FULL, LAST):
            record = pb.Record()
            record.ParseFromString(b"".join(chunks))
            chunks = []
            yield record


def wandb_history(folder: Path) -> tuple[list[dict], list[str]]:
    """(each history row as key -> JSON value, the files of each artifact) of the offline runs under `folder`."""
    import json

    rows, artifacts = [], []
    for log in sorted(folder.rglob("run-*.wandb")):
        for record in wandb_records(log):
            kind = record.WhichOneof("record_type")
            if kind == "history":
                rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                             for item in record.history.item})
            elif kind == "artifact":
                artifacts += [f"{record.artifact.type}:{c.path}" for c in record.artifact.manifest.contents]
    return rows, artifacts


def tensorboard_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder))
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def tensorboard_texts(folder: Path) -> dict[str, str]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder), size_guidance={"tensors": 0})
    events.Reload()
    out = {}
    for tag in events.Tags()["tensors"]:
        tensor = events.Tensors(tag)[-1].tensor_proto
        out[tag.removesuffix("/text_summary")] = tensor.string_val[0].decode("utf-8")
    return out
