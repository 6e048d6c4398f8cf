"""Checkpoint loading and batched inference for sequence classifiers.

`predict_batch` is "a batch of texts in, a batch of outputs out" with the model loaded once by the caller: the
same function runs in-process here and under a distributed engine (Ray Data's `map_batches`) for larger jobs.
`infer` feeds it length-sorted batches with dynamic padding, chunk by chunk, so memory is bounded by the chunk,
not the eval set, and yields results in the eval set's order.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from erroranalysis.core.errors import ModelError
from erroranalysis.core.files import hash_files
from erroranalysis.core.libraries import import_model_libraries, quiet_transformers
from erroranalysis.infer import runtime
from erroranalysis.infer.runtime import check_device, check_precision


@dataclass
class Classifier:
    """A loaded checkpoint: model, tokenizer, class names in id order, where it runs."""

    model: Any
    tokenizer: Any
    labels: list[str]
    path: Path
    device: str
    weights_sha256: str
    precision: str = "fp32"  # the dtype of the weights: "bf16" when loaded for --precision bf16
    task: str = "classification"  # classification, multilabel or regression (erroranalysis.tasks): how logits read


def resolve_device(name: str = "auto") -> str:
    check_device(name)
    import_model_libraries()  # the first use of torch when a checkpoint is loaded
    import torch

    if name == "auto":
        if torch.cuda.is_available():
            return "cuda"
        if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            return "mps"
        return "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ModelError(f"--device {name}: CUDA is not available on this machine; use --device cpu or auto.")
    return name


class PickledWeightsError(ModelError):
    """A checkpoint with pickled weights only (*.bin, *.pt): refused as it is, since loading it could run code."""


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
        raise PickledWeightsError(f"{path}: only pickled weights (*.bin/*.pt) found; save the checkpoint with "
                         "safe_serialization=True (model.save_pretrained writes model.safetensors).")
    raise ModelError(f"{path}: no model weights (model.safetensors) found; point --model at a saved checkpoint.")


def check_safetensors(file: Path) -> None:
    """Catch a truncated or damaged weights file before loading anything: safetensors reads the header and checks
    that the file holds every tensor it lists (no tensor data is read)."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(file), framework="numpy"):
            pass
    except SafetensorError as exc:
        reason = str(exc).split(": ", 1)[-1]
        raise ModelError(f"{file}: truncated or damaged weights file ({reason}; {file.stat().st_size} bytes); "
                         "copy the checkpoint again.") from None


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


def sequence_task(path: str | Path, task: str | None = None) -> str:
    """classification, multilabel or regression: the task a sequence-classification checkpoint runs as, read from
    its config.json and checked against `task` (--task; None or auto to read it); any other head is refused in one
    line (`erroranalysis.tasks.detect`)."""
    from erroranalysis import tasks

    path = Path(path)
    found = tasks.detect(read_config(path), task, source=str(path / "config.json"))
    if not tasks.TASKS[found].sequence_head:
        raise ModelError(f"{path / 'config.json'}: a {tasks.TASKS[found].summary} checkpoint; run it with "
                         f"--task {found}.")
    return found


def load_classifier(path: str | Path, *, device: str = "auto", trust_remote_code: bool = False,
                    precision: str = "fp32", task: str | None = None) -> Classifier:
    """Load a local sequence-classification checkpoint, offline, from safetensors only, as the task its config
    says (`sequence_task`; `task` is --task). With `precision` bf16 (or auto on CUDA) the weights are loaded as
    bfloat16: measured here 1.4x less CPU than fp32 on a CPU with AMX, where fp32 weights under bf16 autocast were
    slower than fp32 (every op casts its weights again)."""
    path = Path(path)
    files = check_checkpoint(path, trust_remote_code)
    task = sequence_task(path, task)
    model, tokenizer, resolved, weights = _load(path, device, trust_remote_code, precision)
    id2label = model.config.id2label
    labels = [str(id2label[i]) for i in range(len(id2label))]
    return Classifier(model=model, tokenizer=tokenizer, labels=labels, path=path, device=resolved,
                      weights_sha256=weights_sha256(files), precision=weights, task=task)


def _load(path: Path, device: str, trust_remote_code: bool, precision: str):
    """(model, tokenizer, device, precision of the weights) of a checked checkpoint folder."""
    resolved = resolve_device(device)
    import torch

    weights = "bf16" if resolve_precision(precision, resolved) == "bf16" else "fp32"
    dtype = torch.bfloat16 if weights == "bf16" else torch.float32

    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    try:
        with quiet_transformers():
            tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True,
                                                      trust_remote_code=trust_remote_code)
            model = AutoModelForSequenceClassification.from_pretrained(
                path, local_files_only=True, use_safetensors=True, trust_remote_code=trust_remote_code, dtype=dtype)
    except (OSError, ValueError, KeyError) as exc:
        raise ModelError(f"{path}: cannot load the checkpoint ({str(exc).splitlines()[0]}).") from None
    return model.eval().to(resolved), tokenizer, resolved, weights


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


def resolve_precision(precision: str, device: str) -> str:
    """The precision that runs: "auto" is bf16 on CUDA, fp32 elsewhere; an explicit choice is kept."""
    check_precision(precision)
    if precision == "auto":
        return "bf16" if device.split(":")[0] == "cuda" else "fp32"
    return precision


def cpu_bf16_note(precision: str, device: str, cpuinfo: str | Path = "/proc/cpuinfo") -> str | None:
    """A warning when bf16 runs on a CPU without native bf16 instructions (AMX or AVX512_BF16): autocast then
    emulates it, slower than fp32. None when the CPU has them, or when it cannot be told (no /proc/cpuinfo)."""
    if precision != "bf16" or device.split(":")[0] != "cpu":
        return None
    try:
        flags = set(Path(cpuinfo).read_text(errors="replace").split())
    except OSError:
        return None
    if {"amx_bf16", "avx512_bf16"} & flags:
        return None
    return ("--precision bf16 on a CPU without native bf16 (no amx_bf16 or avx512_bf16 in /proc/cpuinfo): it is "
            "emulated and usually slower than fp32 here; use --precision fp32, or bf16 on CUDA.")


def _last_hidden_hook(model):
    """Capture the backbone's last hidden state during the forward pass (its first output), so the model is not
    asked for every layer's states (`output_hidden_states=True`) when only the last is used. None when the model has
    no separate backbone module; then the caller asks for the hidden states."""
    base = getattr(model, "base_model", None)
    if base is None or base is model:
        return None, None
    captured = {}

    def hook(module, args, output):
        captured["last"] = output[0] if isinstance(output, (tuple, list)) else output.last_hidden_state

    return base.register_forward_hook(hook), captured


def predict_batch(clf: Classifier, input_ids: list[list[int]], label_ids: np.ndarray | None,
                  precision: str = "fp32") -> dict[str, np.ndarray]:
    """One padded forward pass: probabilities (as the task reads the logits: `erroranalysis.infer.heads`), loss
    of the gold (class ids, multi-hot rows or target values), mean-pooled last hidden state.

    `precision` ("fp32" or "bf16"; see `resolve_precision` for "auto"): a model loaded in bf16 runs as it is; bf16
    asked of a model loaded in fp32 runs under bf16 autocast."""
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
    precision = resolve_precision(precision, clf.device)
    handle, captured = _last_hidden_hook(clf.model)
    try:
        autocast = precision == "bf16" and clf.precision != "bf16"
        with torch.inference_mode(), torch.autocast(device_type, dtype=torch.bfloat16, enabled=autocast):
            out = clf.model(input_ids=ids_t, attention_mask=mask_t, output_hidden_states=handle is None)
    finally:
        if handle is not None:
            handle.remove()
    from erroranalysis import tasks

    result = tasks.TASKS[clf.task].outputs_function()(out.logits.float(), label_ids)
    last = (captured["last"] if handle is not None else out.hidden_states[-1]).float()
    m = mask_t.unsqueeze(-1).to(last.dtype)
    result["hidden"] = ((last * m).sum(1) / m.sum(1).clamp(min=1)).cpu().numpy()
    return result


# Batches on a CPU: length-sorted rows up to this many padded tokens (and CPU_BATCH_ROWS rows), by the precision
# that runs. Chosen by `benchmarks/inference.py --batching` (short texts and 256-token documents, fp32 and bf16):
# a fixed number of rows suits one length only (32 rows of documents took 1.17x the time of 8 in fp32), bf16 runs
# best near 4,096 tokens and fp32 near 2,048.
CPU_BATCH_TOKENS = {"fp32": 2048, "bf16": 4096}
CPU_BATCH_ROWS = 128
GPU_BATCH_ROWS = 32  # not measured on a GPU here: the rows per batch of earlier versions, no token budget


def batching(device: str, batch_size: int | None, max_tokens: int | None, precision: str = "fp32") -> tuple[int, int]:
    """(rows, tokens) per forward pass: what `--batch-size` and `--max-tokens` ask, or the default for the device
    and the precision that runs when neither is given; tokens 0 means no budget. A batch size alone is kept as it
    is (no token budget)."""
    runtime.BATCH_SIZE.check("batch_size", batch_size)
    runtime.MAX_TOKENS.check("max_tokens", max_tokens)
    on_cpu = device.split(":")[0] == "cpu"
    if batch_size is None and max_tokens is None:
        return (CPU_BATCH_ROWS, CPU_BATCH_TOKENS[resolve_precision(precision, device)]) if on_cpu \
            else (GPU_BATCH_ROWS, 0)
    if batch_size is None:
        return (CPU_BATCH_ROWS if on_cpu else GPU_BATCH_ROWS), max_tokens
    return batch_size, max_tokens or 0


def batches(lengths: np.ndarray, rows: int, tokens: int) -> Iterator[np.ndarray]:
    """Positions of `lengths`, longest first, cut into batches of at most `rows` rows and, when `tokens` is set,
    at most `tokens` padded tokens (rows x the batch's longest); under a token budget the rows are a power of two
    (at most `rows`): few distinct shapes, so the kernels oneDNN keeps per shape stay few (by hand, while choosing:
    any row count took ~90 MB more peak memory on 3,000 short texts). A row longer than the budget is a batch alone."""
    order = np.argsort(-lengths, kind="stable")  # longest first: padding only within similar lengths
    start = 0
    while start < len(order):
        fit = min(rows, tokens // max(1, int(lengths[order[start]])))
        size = rows if not tokens else (1 << (fit.bit_length() - 1) if fit else 1)
        yield order[start:start + size]
        start += size


class ChunkPredictor:
    """A checkpoint loaded once, mapping a chunk of rows to its outputs: the unit every engine runs (in-process,
    and once per Ray actor through `map_batches`), so both run one implementation.

    `__call__(batch)`: `batch["text"]` (and optionally the gold: `label_id` int class ids, `label_ids` multi-hot
    rows for multi-label, `target` values for regression; `heads.GOLD_COLUMNS`) as lists, arrays or Arrow columns in; probs, loss, hidden, n_tokens, truncated out, in the batch's row order. Inside a chunk the
    rows are tokenized, sorted by length and fed to `predict_batch` in `batches` (see `batching` for their size)."""

    def __init__(self, model: str | Path | None = None, *, batch_size: int | None = None, max_length: int = 256,
                 precision: str = "fp32", device: str = "auto", trust_remote_code: bool = False,
                 clf: Classifier | None = None, max_tokens: int | None = None, task: str | None = None):
        runtime.MAX_LENGTH.check("max_length", max_length)
        check_precision(precision)
        self.clf = clf if clf is not None else load_classifier(model, device=device, precision=precision,
                                                               trust_remote_code=trust_remote_code, task=task)
        model_max = getattr(self.clf.model.config, "max_position_embeddings", None)
        self.max_length = min(max_length, int(model_max)) if model_max else max_length
        self.precision = resolve_precision(precision, self.clf.device)
        self.batch_size, self.max_tokens = batching(self.clf.device, batch_size, max_tokens, self.precision)

    def __call__(self, batch, progress: Callable[[int], None] | None = None) -> dict[str, np.ndarray]:
        from erroranalysis.infer.heads import GOLD_COLUMNS, gold_array

        texts = _as_list(batch["text"])
        column = GOLD_COLUMNS[self.clf.task]
        gold = gold_array(self.clf.task, batch[column]) if _has(batch, column) else None
        return _infer_chunk(self.clf, texts, gold, (self.batch_size, self.max_tokens), self.max_length,
                            self.precision, progress)


def _as_list(column) -> list:
    if hasattr(column, "to_pylist"):
        return column.to_pylist()
    return list(column)


def _has(batch, name: str) -> bool:
    names = getattr(batch, "column_names", None)
    return name in (names if names is not None else batch)


def infer(clf: Classifier, texts: list[str], label_ids: np.ndarray | None, *, batch_size: int | None = None,
          max_length: int = 256, precision: str = "fp32", chunk_size: int = 4096,
          progress: Callable[[int], None] | None = None,
          max_tokens: int | None = None) -> Iterator[dict[str, np.ndarray]]:
    """Yield per-chunk results, in input order: probs, loss, hidden, n_tokens, truncated."""
    predictor = ChunkPredictor(clf=clf, batch_size=batch_size, max_length=max_length, precision=precision,
                               max_tokens=max_tokens)
    for start in range(0, len(texts), chunk_size):
        from erroranalysis.infer.heads import GOLD_COLUMNS

        batch = {"text": list(texts[start:start + chunk_size])}
        if label_ids is not None:
            batch[GOLD_COLUMNS[clf.task]] = np.asarray(label_ids[start:start + chunk_size])
        yield predictor(batch, progress)


def _infer_chunk(clf, texts, gold, batching_, max_length, precision, progress) -> dict[str, np.ndarray]:
    ids, truncated = tokenize(clf.tokenizer, texts, max_length)
    lengths = np.fromiter((len(x) for x in ids), dtype=np.int32, count=len(ids))
    n, k = len(texts), (1 if clf.task == "regression" else len(clf.labels))
    probs = np.empty((n, k), dtype=np.float32)
    loss = np.full(n, np.nan, dtype=np.float32)
    hidden = None
    for rows in batches(lengths, *batching_):
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
