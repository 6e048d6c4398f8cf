"""Language models that generate: decoder-only (causal) models from a local folder or a GGUF file, and
encoder-decoder (seq2seq: T5, BART, mT5, Flan-T5) models from a local folder, offline, from safetensors only.

A folder whose config says `is_encoder_decoder` loads as `AutoModelForSeq2SeqLM` (`infer.seq2seq` generates with
it); any other as `AutoModelForCausalLM`.

A GGUF file is read by transformers once (dequantized, 13 to 17 s for SmolLM2-135M) and written as a safetensors
folder under `<cache>/gguf/<sha256 prefix>/`; every later load reads that folder (well under a second).
"""

from __future__ import annotations

import copy
import inspect
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from erroranalysis.core import files
from erroranalysis.core.errors import ModelError
from erroranalysis.core.files import cache_root  # noqa: F401  (causal_lm.cache_root, as before)
from erroranalysis.core.libraries import import_model_libraries, quiet_transformers
from erroranalysis.infer.runtime import check_precision

GGUF_MAGIC = b"GGUF"
DEFAULT_CONTEXT = 2048


@dataclass
class CausalLM:
    """A loaded causal language model and where it came from."""

    model: Any
    tokenizer: Any
    path: Path  # what the user passed: a folder or a .gguf file
    folder: Path  # the safetensors folder actually loaded (the cache folder for a GGUF file)
    device: str
    precision: str  # "fp32" or "bf16"
    weights_sha256: str
    format: str  # "safetensors" or "gguf"
    context_length: int
    eos_ids: tuple[int, ...] = ()
    pad_id: int = 0
    cache_kwarg: str = field(default="past_key_values", repr=False)  # the forward argument of the KV cache
    # encoder-decoder models: the decoder starts from these tokens (decoder_start_token_id, then the
    # generation config's forced_bos_token_id when it has one, as transformers' generate does)
    encoder_decoder: bool = False
    decoder_prefix: tuple[int, ...] = ()

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))

    def describe(self) -> dict:
        return {"path": str(Path(self.path).resolve()), "format": self.format, "weights_sha256": self.weights_sha256,
                "converted_folder": str(self.folder) if self.format == "gguf" else None,
                "precision": self.precision, "context_length": self.context_length,
                "chat_template": self.has_chat_template, "architecture": type(self.model).__name__,
                "encoder_decoder": self.encoder_decoder}


def is_gguf(path: str | Path) -> bool:
    path = Path(path)
    return path.suffix.lower() == ".gguf"


def check_gguf(file: Path) -> None:
    """Cheap checks before transformers is imported: the file exists and starts with the GGUF magic bytes."""
    if not file.exists():
        raise ModelError(f"{file}: no such GGUF file; check --model.")
    if not file.is_file():
        raise ModelError(f"{file}: is a folder; --model takes a .gguf file or a checkpoint folder.")
    with open(file, "rb") as f:
        head = f.read(4)
    if head != GGUF_MAGIC:
        raise ModelError(f"{file}: not a GGUF file (it does not start with the GGUF magic bytes); "
                         "pass a .gguf model file or a safetensors checkpoint folder.")


def gguf_sha256(file: Path) -> str:
    """The file's SHA-256, remembered by (path, size, mtime) so later loads do not re-read a large file."""
    return files.remembered_sha256(file, cache_root() / "gguf" / "hashes")


def converted_folder(file: Path, sha256: str | None = None) -> Path:
    return cache_root() / "gguf" / (sha256 or gguf_sha256(file))[:24]


def convert_gguf(file: str | Path, *, log: Callable[[str], None] | None = None) -> Path:
    """The cached safetensors folder for a GGUF file, converting it on first use.

    transformers reads the GGUF (dequantized to fp32); the config loses its `quantization_config`, a plain model is
    rebuilt from it and given the weights with `load_state_dict`, then saved with the tokenizer (chat template
    included). The folder appears at once (temporary folder, then a rename) or not at all.
    """
    file = Path(file)
    check_gguf(file)
    sha = gguf_sha256(file)
    target = converted_folder(file, sha)
    if (target / "source.json").is_file():
        return target
    if log:
        log(f"converting {file.name} to a cached safetensors folder (once): {target}")
    import_model_libraries()
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    try:
        with quiet_transformers():
            tokenizer = AutoTokenizer.from_pretrained(file.parent, gguf_file=file.name, local_files_only=True)
            loaded = AutoModelForCausalLM.from_pretrained(file.parent, gguf_file=file.name, local_files_only=True,
                                                          dtype=torch.float32)
    except (KeyboardInterrupt, MemoryError):
        raise
    except Exception as exc:  # gguf and transformers raise many types for files they cannot map
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ModelError(f"{file}: transformers cannot read this GGUF file ({first}); use a GGUF of an "
                         "architecture transformers supports, or a safetensors checkpoint folder.") from None
    config_dict = loaded.config.to_dict()
    config_dict.pop("quantization_config", None)
    config_dict.pop("_name_or_path", None)
    config = AutoConfig.for_model(**config_dict)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(loaded.state_dict(), assign=True, strict=False)
    model.tie_weights()
    model.generation_config = copy.deepcopy(loaded.generation_config)
    del loaded
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        from importlib import metadata

        (tmp / "source.json").write_text(json.dumps(
            {"gguf": str(file.resolve()), "sha256": sha, "transformers": metadata.version("transformers")},
            indent=2) + "\n")
        try:
            os.replace(tmp, target)
        except OSError:  # another process finished the same conversion first
            if not (target / "source.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def load_causal_lm(path: str | Path, *, device: str = "auto", precision: str = "auto",
                   trust_remote_code: bool = False, log: Callable[[str], None] | None = None) -> CausalLM:
    """Load a local causal LM from a safetensors folder or a `.gguf` file (converted once, then cached), or an
    encoder-decoder model from a folder whose config says `is_encoder_decoder`."""
    from erroranalysis.infer.classifier import check_checkpoint, read_config, resolve_device, weights_sha256

    check_precision(precision)
    path = Path(path)
    if is_gguf(path):
        check_gguf(path)
        sha = gguf_sha256(path)
        folder = convert_gguf(path, log=log)
        fmt = "gguf"
    else:
        if path.is_file():
            raise ModelError(f"{path}: is a file; --model takes a checkpoint folder or a .gguf file.")
        folder, sha, fmt = path, None, "safetensors"
    files = check_checkpoint(folder, trust_remote_code)
    resolved = resolve_device(device)
    if precision == "auto":
        precision = "bf16" if resolved.startswith("cuda") else "fp32"
    if sha is None:
        sha = weights_sha256(files)

    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

    seq2seq = bool(read_config(folder).get("is_encoder_decoder"))
    kind = "an encoder-decoder (seq2seq)" if seq2seq else "a causal"
    try:
        with quiet_transformers():
            tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True,
                                                      trust_remote_code=trust_remote_code)
            model = (AutoModelForSeq2SeqLM if seq2seq else AutoModelForCausalLM).from_pretrained(
                folder, local_files_only=True, use_safetensors=True, trust_remote_code=trust_remote_code,
                dtype=torch.bfloat16 if precision == "bf16" else torch.float32)
    except (OSError, ValueError, KeyError) as exc:
        raise ModelError(f"{folder}: cannot load it as {kind} language model ({str(exc).splitlines()[0]}).") from None
    model.eval().to(resolved)
    return wrap_causal_lm(model, tokenizer, path=path, folder=folder, device=resolved, precision=precision,
                          weights_sha256=sha, fmt=fmt)


def wrap_causal_lm(model, tokenizer, *, path: str | Path, folder: str | Path | None = None, device: str | None = None,
                   precision: str | None = None, weights_sha256: str | None = None, fmt: str = "in-memory") -> CausalLM:
    """A CausalLM around a model already in memory (a Trainer's, during training): its device and precision are
    the model's own unless given."""
    import torch

    param = next(model.parameters(), None)
    if device is None:
        device = str(param.device) if param is not None else "cpu"
    if precision is None:
        precision = "bf16" if param is not None and param.dtype == torch.bfloat16 else "fp32"
    eos = _eos_ids(model, tokenizer)
    pad = tokenizer.pad_token_id
    if pad is None:
        pad = eos[0] if eos else 0
    seq2seq = bool(getattr(model.config, "is_encoder_decoder", False))
    return CausalLM(model=model, tokenizer=tokenizer, path=Path(path), folder=Path(folder or path), device=device,
                    precision=precision, weights_sha256=weights_sha256, format=fmt,
                    context_length=_context_length(model, tokenizer), eos_ids=eos, pad_id=int(pad),
                    cache_kwarg=_cache_argument(model), encoder_decoder=seq2seq,
                    decoder_prefix=_decoder_prefix(model, path) if seq2seq else ())


def _decoder_prefix(model, path) -> tuple[int, ...]:
    """The tokens an encoder-decoder's decoder starts from: its start token, then a forced BOS (BART)."""
    config = model.config
    generation = getattr(model, "generation_config", None)
    start = getattr(generation, "decoder_start_token_id", None)
    start = start if start is not None else getattr(config, "decoder_start_token_id", None)
    if isinstance(start, (list, tuple)):
        start = start[0] if start else None
    if start is None:
        raise ModelError(f"{path}: the config of this encoder-decoder model sets no decoder_start_token_id, so "
                         "generation cannot start; set it in config.json.")
    forced = getattr(generation, "forced_bos_token_id", None)
    return (int(start),) + ((int(forced),) if forced is not None else ())


def _eos_ids(model, tokenizer) -> tuple[int, ...]:
    ids: list[int] = []
    config_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in (config_eos, tokenizer.eos_token_id):
        if value is None:
            continue
        for v in (value if isinstance(value, (list, tuple)) else [value]):
            if v is not None and int(v) not in ids:
                ids.append(int(v))
    return tuple(ids)


def _context_length(model, tokenizer) -> int:
    config = model.config
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", "n_ctx"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    value = getattr(tokenizer, "model_max_length", None)
    return int(value) if isinstance(value, int) and 0 < value < 10_000_000 else DEFAULT_CONTEXT


def _cache_argument(model) -> str:
    """transformers 5.x calls the KV cache argument `cache`; 4.x called it `past_key_values`."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"
