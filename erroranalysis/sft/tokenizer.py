"""The tokenizer the trainer will use: from a tokenizer or checkpoint folder, or from a GGUF file (its tokenizer,
chat template included, saved once to a cache folder: reading it from the GGUF takes seconds, the folder a fraction
of one), and the special tokens the checks need.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from erroranalysis.core.errors import ModelError

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
GENERATION_TAG = "{% generation %}"
PROBE = [{"role": "user", "content": "Zq"}, {"role": "assistant", "content": "Qz"}]


@dataclass
class Tokens:
    """A loaded tokenizer and the facts about it the checks use. `stop_ids`: EOS and the template's end-of-turn
    token (what the last trained token of an answer should be)."""

    tokenizer: Any
    path: str
    bos_id: int | None
    eos_id: int | None
    pad_id: int | None
    stop_ids: frozenset[int] = field(default_factory=frozenset)
    has_template: bool = False
    generation_tags: bool = False  # the template marks assistant tokens ({% generation %}), as assistant_only_loss needs

    def describe(self) -> dict:
        tok = self.tokenizer
        return {"path": self.path, "class": type(tok).__name__, "vocab_size": len(tok),
                "bos_token": tok.bos_token, "eos_token": tok.eos_token, "pad_token": tok.pad_token,
                "pad_is_eos": self.pad_id is not None and self.pad_id == self.eos_id,
                "stop_tokens": sorted(tok.convert_ids_to_tokens(sorted(self.stop_ids))),
                "chat_template": self.has_template, "generation_tags": self.generation_tags}

    def piece(self, token_id: int) -> str:
        return self.tokenizer.convert_ids_to_tokens(int(token_id)) or ""


def load_tokens(path: str | Path) -> Tokens:
    """The tokenizer at `path` (a folder with tokenizer files, a checkpoint folder, or a .gguf file)."""
    from erroranalysis.infer.causal_lm import is_gguf

    path = Path(path)
    folder = gguf_tokenizer(path) if is_gguf(path) else _folder(path)
    from erroranalysis.core.libraries import import_model_libraries, quiet_transformers

    import_model_libraries()
    from transformers import AutoTokenizer

    try:
        with quiet_transformers():
            tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelError(f"{path}: cannot load a tokenizer from it ({str(exc).splitlines()[0]}); pass a tokenizer "
                         "or checkpoint folder, or a .gguf file.") from None
    if not getattr(tokenizer, "is_fast", False):  # character offsets place each token in its message
        raise ModelError(f"{path}: {type(tokenizer).__name__} is a slow (Python) tokenizer; sft-check needs a fast "
                         "one (a tokenizer.json): save it with `AutoTokenizer.from_pretrained(..., use_fast=True)`.")
    return facts(tokenizer, str(path))


def facts(tokenizer, path: str = "") -> Tokens:
    """Tokens for a tokenizer already loaded (tests, the Python API)."""
    template = getattr(tokenizer, "chat_template", None)
    template_text = template if isinstance(template, str) else json.dumps(template or "")
    stops = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    if template:
        end = end_of_turn(tokenizer)
        if end is not None:
            stops.add(end)
    return Tokens(tokenizer, path, tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id,
                  frozenset(stops), bool(template), "generation" in template_text and "endgeneration" in template_text)


def end_of_turn(tokenizer) -> int | None:
    """The special token the chat template puts right after an assistant message's text (`<|im_end|>`,
    `<|eot_id|>`), found by rendering a probe conversation; None when what follows is not a special token."""
    try:
        text = tokenizer.apply_chat_template(PROBE, tokenize=False)
    except Exception:  # a template that needs other roles or keys: no end-of-turn token known
        return None
    at = text.rfind(PROBE[1]["content"])
    if at < 0:
        return None
    ids = tokenizer(text[at + len(PROBE[1]["content"]):], add_special_tokens=False)["input_ids"]
    special = set(tokenizer.all_special_ids) | set(getattr(tokenizer, "added_tokens_decoder", {}) or {})
    return ids[0] if ids and ids[0] in special else None


def _folder(path: Path) -> Path:
    if not path.exists():
        raise ModelError(f"{path}: no such tokenizer or checkpoint folder; check --model.")
    if path.is_file():
        raise ModelError(f"{path}: is a file; --model takes a tokenizer or checkpoint folder, or a .gguf file.")
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise ModelError(f"{path}: no tokenizer files (tokenizer.json, tokenizer_config.json) in this folder; pass "
                         "the folder the tokenizer was saved to.")
    return path


def gguf_tokenizer(file: Path) -> Path:
    """A folder holding the GGUF file's tokenizer: the converted model folder when `erroranalysis run` made one,
    else a tokenizer-only folder saved once under `<cache>/gguf-tokenizer/`."""
    from erroranalysis.infer.causal_lm import cache_root, check_gguf, converted_folder, gguf_sha256

    check_gguf(file)
    sha = gguf_sha256(file)
    model_folder = converted_folder(file, sha)
    if (model_folder / "source.json").is_file():
        return model_folder
    target = cache_root() / "gguf-tokenizer" / sha[:24]
    if (target / "tokenizer_config.json").is_file():
        return target
    from erroranalysis.core.libraries import import_model_libraries, quiet_transformers

    import_model_libraries()
    from transformers import AutoTokenizer

    try:
        with quiet_transformers():
            tokenizer = AutoTokenizer.from_pretrained(file.parent, gguf_file=file.name, local_files_only=True)
    except Exception as exc:  # gguf and transformers raise many types for files they cannot map
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ModelError(f"{file}: transformers cannot read the tokenizer of this GGUF file ({first}); pass a "
                         "tokenizer folder instead.") from None
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tokenizer-", dir=target.parent))
    try:
        tokenizer.save_pretrained(tmp)
        try:
            os.replace(tmp, target)
        except OSError:  # another process saved it first
            if not (target / "tokenizer_config.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
