"""Checkpoint loading and batched inference for sequence classifiers.

`predict_batch` is "a batch of texts in, a batch of outputs out" with the model loaded once by the caller: the
same function runs in-process here and under a distributed engine (Ray Data's `map_batches`) for larger jobs.
`infer` feeds it length-sorted batches with dynamic padding, chunk by chunk, so memory is bounded by the chunk,
not the eval set, and yields results in the eval set's order.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from erroranalysis.errors import ModelError
from erroranalysis.files import hash_files
from erroranalysis.validation import check_param

PRECISIONS = ("fp32", "bf16")


@dataclass
class Classifier:
    """A loaded checkpoint: model, tokenizer, class names in id order, where it runs."""

    model: Any
    tokenizer: Any
    labels: list[str]
    path: Path
    device: str
    weights_sha256: str


def resolve_device(name: str = "auto") -> str:
    import torch

    check_param("device", name, name in ("auto", "cpu", "cuda", "mps") or name.startswith("cuda:"),
                "one of auto, cpu, cuda, cuda:N, mps")
    if name == "auto":
        if torch.cuda.is_available():
            return "cuda"
        if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            return "mps"
        return "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ModelError(f"--device {name}: CUDA is not available on this machine; use --device cpu or auto.")
    return name


def weight_files(path: Path) -> list[Path]:
    """The checkpoint's safetensors files; refuses pickled weights, which can run code when loaded."""
    index = path / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        missing = [s for s in shards if not (path / s).is_file()]
        if missing:
            raise ModelError(f"{path}: shard {missing[0]} listed in {index.name} is missing; copy the whole checkpoint.")
        return [path / s for s in shards]
    if (path / "model.safetensors").is_file():
        return [path / "model.safetensors"]
    if any(path.glob("*.bin")) or any(path.glob("*.pt")):
        raise ModelError(f"{path}: only pickled weights (*.bin/*.pt) found; save the checkpoint with "
                         "safe_serialization=True (model.save_pretrained writes model.safetensors).")
    raise ModelError(f"{path}: no model weights (model.safetensors) found; point --model at a saved checkpoint.")


def check_safetensors(file: Path) -> None:
    """Catch a truncated or damaged weights file from its header, before loading anything."""
    size = file.stat().st_size
    with open(file, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise ModelError(f"{file}: truncated weights file ({size} bytes); copy the checkpoint again.")
        (header_len,) = struct.unpack("<Q", head)
        if header_len > size - 8:
            raise ModelError(f"{file}: truncated weights file (header says {header_len} bytes, file has {size}); "
                             "copy the checkpoint again.")
        try:
            header = json.loads(f.read(header_len))
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise ModelError(f"{file}: damaged weights file (unreadable header); copy the checkpoint again.") from None
    end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
    if 8 + header_len + end > size:
        raise ModelError(f"{file}: truncated weights file ({size} of {8 + header_len + end} bytes); "
                         "copy the checkpoint again.")


def read_config(path: Path) -> dict:
    if not path.exists():
        raise ModelError(f"{path}: no such checkpoint folder; check --model.")
    if not path.is_dir():
        raise ModelError(f"{path}: is a file; --model takes the checkpoint folder (with config.json).")
    config_file = path / "config.json"
    if not config_file.is_file():
        raise ModelError(f"{path}: no config.json; point --model at a folder saved with save_pretrained.")
    try:
        return json.loads(config_file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelError(f"{config_file}: not valid JSON ({exc}); re-save the checkpoint.") from None


def check_remote_code(path: Path, config: dict, trust_remote_code: bool) -> None:
    if config.get("auto_map") and not trust_remote_code:
        raise ModelError(f"{path}: config.json asks to run code shipped with the checkpoint (auto_map); it was "
                         "not run. Pass --trust-remote-code only if you trust its author.")


def check_checkpoint(folder: Path, trust_remote_code: bool) -> list[Path]:
    """Everything checked before a checkpoint is loaded (config, remote code, safetensors weights whole); returns
    the weight files."""
    config = read_config(folder)
    check_remote_code(folder, config, trust_remote_code)
    files = weight_files(folder)
    for file in files:
        check_safetensors(file)
    return files


def load_classifier(path: str | Path, *, device: str = "auto", trust_remote_code: bool = False) -> Classifier:
    """Load a local sequence-classification checkpoint, offline, from safetensors only."""
    path = Path(path)
    files = check_checkpoint(path, trust_remote_code)
    resolved = resolve_device(device)

    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True, trust_remote_code=trust_remote_code)
        model = AutoModelForSequenceClassification.from_pretrained(
            path, local_files_only=True, use_safetensors=True, trust_remote_code=trust_remote_code)
    except (OSError, ValueError, KeyError) as exc:
        raise ModelError(f"{path}: cannot load the checkpoint ({str(exc).splitlines()[0]}).") from None
    model.eval().to(resolved)
    id2label = model.config.id2label
    labels = [str(id2label[i]) for i in range(len(id2label))]
    return Classifier(model=model, tokenizer=tokenizer, labels=labels, path=path, device=resolved,
                      weights_sha256=weights_sha256(files))


def weights_sha256(files: list[Path]) -> str:
    """One hash over a checkpoint's weight files, in order: which weights a run used."""
    return hash_files(files)["sha256"]


def tokenize(tokenizer, texts: list[str], max_length: int) -> tuple[list[list[int]], np.ndarray]:
    """Token ids cut to max_length, and whether each text had to be cut."""
    full = tokenizer(texts, add_special_tokens=True, truncation=False, verbose=False)["input_ids"]
    truncated = np.fromiter((len(ids) > max_length for ids in full), dtype=bool, count=len(full))
    if truncated.any():
        cut = tokenizer([texts[i] for i in np.flatnonzero(truncated)], truncation=True,
                        max_length=max_length)["input_ids"]
        for i, ids in zip(np.flatnonzero(truncated), cut):
            full[i] = ids
    return full, truncated


def predict_batch(clf: Classifier, input_ids: list[list[int]], label_ids: np.ndarray | None,
                  precision: str = "fp32") -> dict[str, np.ndarray]:
    """One padded forward pass: probabilities, loss of the gold label, mean-pooled last hidden state."""
    import torch

    longest = max(len(ids) for ids in input_ids)
    pad = clf.tokenizer.pad_token_id or 0
    ids = np.full((len(input_ids), longest), pad, dtype=np.int64)
    mask = np.zeros_like(ids)
    for row, seq in enumerate(input_ids):
        ids[row, :len(seq)] = seq
        mask[row, :len(seq)] = 1
    ids_t = torch.from_numpy(ids).to(clf.device)
    mask_t = torch.from_numpy(mask).to(clf.device)
    device_type = clf.device.split(":")[0]
    use_bf16 = precision == "bf16" or device_type == "cuda"
    with torch.inference_mode(), torch.autocast(device_type, dtype=torch.bfloat16, enabled=use_bf16):
        out = clf.model(input_ids=ids_t, attention_mask=mask_t, output_hidden_states=True)
    logits = out.logits.float()
    log_probs = torch.log_softmax(logits, dim=-1)
    last = out.hidden_states[-1].float()
    m = mask_t.unsqueeze(-1).to(last.dtype)
    pooled = (last * m).sum(1) / m.sum(1).clamp(min=1)
    result = {"probs": log_probs.exp().cpu().numpy(), "hidden": pooled.cpu().numpy()}
    if label_ids is not None:
        gold = torch.as_tensor(label_ids, device=log_probs.device)
        result["loss"] = (-log_probs.gather(1, gold[:, None]).squeeze(1)).cpu().numpy()
    return result


def infer(clf: Classifier, texts: list[str], label_ids: np.ndarray | None, *, batch_size: int = 32,
          max_length: int = 256, precision: str = "fp32", chunk_size: int = 4096,
          progress: Callable[[int], None] | None = None) -> Iterator[dict[str, np.ndarray]]:
    """Yield per-chunk results, in input order: probs, loss, hidden, n_tokens, truncated."""
    check_param("batch_size", batch_size, batch_size >= 1, "an integer >= 1")
    check_param("max_length", max_length, max_length >= 2, "an integer >= 2")
    check_param("precision", precision, precision in PRECISIONS, f"one of {', '.join(PRECISIONS)}")
    model_max = getattr(clf.model.config, "max_position_embeddings", None)
    if model_max:
        max_length = min(max_length, int(model_max))
    for start in range(0, len(texts), chunk_size):
        chunk = list(texts[start:start + chunk_size])
        gold = None if label_ids is None else np.asarray(label_ids[start:start + chunk_size])
        yield _infer_chunk(clf, chunk, gold, batch_size, max_length, precision, progress)


def _infer_chunk(clf, texts, gold, batch_size, max_length, precision, progress) -> dict[str, np.ndarray]:
    ids, truncated = tokenize(clf.tokenizer, texts, max_length)
    lengths = np.fromiter((len(x) for x in ids), dtype=np.int32, count=len(ids))
    order = np.argsort(-lengths, kind="stable")  # longest first: padding only within similar lengths
    n, k = len(texts), len(clf.labels)
    probs = np.empty((n, k), dtype=np.float32)
    loss = np.full(n, np.nan, dtype=np.float32)
    hidden = None
    for b in range(0, n, batch_size):
        rows = order[b:b + batch_size]
        out = predict_batch(clf, [ids[i] for i in rows], None if gold is None else gold[rows], precision)
        if hidden is None:
            hidden = np.empty((n, out["hidden"].shape[1]), dtype=np.float32)
        probs[rows] = out["probs"]
        hidden[rows] = out["hidden"]
        if "loss" in out:
            loss[rows] = out["loss"]
        if progress:
            progress(len(rows))
    return {"probs": probs, "loss": loss, "hidden": hidden, "n_tokens": lengths, "truncated": truncated}
