"""Token-classification inference (`AutoModelForTokenClassification`: NER, POS, chunking): words in, one tag per
word out, with its probability, its loss against the gold tag and its contextual vector.

Words are what the eval set gives (a `tokens` list), or, for raw text, the fast tokenizer's own pre-tokenized words
(`word_ids()` and the character offsets of the sub-tokens, so a character span maps onto whole words). A word is
predicted from its sub-tokens' logits: the first sub-token's (`first`, the default, how transformers' Trainer
labels words for training), their mean (`mean`) or their element-wise maximum (`max`); its vector is the mean of
its sub-tokens' last hidden states. A sentence longer than `max_length` sub-tokens is cut: the words past the cut
are predicted `O` and the sentence is flagged `truncated`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from erroranalysis.core.errors import ModelError
from erroranalysis.core.libraries import quiet_transformers
from erroranalysis.core.params import Choice, Params, Text, param, spec_field
from erroranalysis.infer import runtime
from erroranalysis.metrics.tokens import MODES, OUTSIDE, SCHEMES

AGGREGATIONS = ("first", "mean", "max")
PANEL = "Token classification (--task token-classification)"
TOKEN_BATCH = 32  # sentences per forward pass when --batch-size is not given


@dataclass(frozen=True)
class TokenParams(Params):
    """How a token-classification run reads its eval set, runs the model and reads tag sequences."""

    tokens_column: str = param("tokens", Text(), "Column of the words of a sentence (a list of strings).",
                               panel=PANEL)
    tags_column: str = param("tags", Text(), "Column of the gold tags, one per word (names or ids).", panel=PANEL)
    spans_column: str = param("spans", Text(), "For raw text (--text-column): column of gold character spans, a "
                              "list of {start, end, label}.", panel=PANEL)
    aggregation: str = param("first", Choice(*AGGREGATIONS), "A word's logits from its sub-tokens: the first "
                             "sub-token's, their mean or their maximum.", panel=PANEL)
    tag_scheme: str = param("auto", Choice(*SCHEMES), "Tag scheme: auto (from the model's labels), IOB2 (= BIO), "
                            "IOBES or plain (tags without prefixes, e.g. POS).", panel=PANEL)
    span_mode: str = param("default", Choice(*MODES), "How tags make entity spans for the error analysis: default "
                           "(conlleval, lenient) or strict (well-formed only); metrics.json reports both.",
                           panel=PANEL)
    batch_size: int | None = spec_field(runtime.BATCH_SIZE)
    max_length: int = spec_field(runtime.MAX_LENGTH)
    precision: str = spec_field(runtime.PRECISION)
    device: str = spec_field(runtime.DEVICE)
    trust_remote_code: bool = spec_field(runtime.TRUST_REMOTE_CODE)

    @property
    def rows_per_batch(self) -> int:
        return self.batch_size or TOKEN_BATCH


@dataclass
class TokenClassifier:
    """A loaded token-classification checkpoint: model, fast tokenizer, tag names in id order, where it runs."""

    model: Any
    tokenizer: Any
    labels: list[str]
    path: Path
    device: str
    weights_sha256: str
    precision: str = "fp32"

    def describe(self) -> dict:
        return {"path": str(Path(self.path).resolve()), "weights_sha256": self.weights_sha256,
                "architecture": type(self.model).__name__, "precision": self.precision}


def load_token_classifier(path: str | Path, *, device: str = "auto", precision: str = "auto",
                          trust_remote_code: bool = False) -> TokenClassifier:
    """Load a local token-classification checkpoint, offline, from safetensors; its tokenizer must be a fast one
    (word alignment needs `word_ids()` and offsets)."""
    from erroranalysis.infer.classifier import check_checkpoint, resolve_device, resolve_precision, weights_sha256

    path = Path(path)
    files = check_checkpoint(path, trust_remote_code)
    resolved = resolve_device(device)
    weights = "bf16" if resolve_precision(precision, resolved) == "bf16" else "fp32"
    import torch
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    try:
        with quiet_transformers():
            tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True, trust_remote_code=trust_remote_code)
            model = AutoModelForTokenClassification.from_pretrained(
                path, local_files_only=True, use_safetensors=True, trust_remote_code=trust_remote_code,
                dtype=torch.bfloat16 if weights == "bf16" else torch.float32)
    except (OSError, ValueError, KeyError) as exc:
        raise ModelError(f"{path}: cannot load it as a token classifier ({str(exc).splitlines()[0]}).") from None
    if not getattr(tokenizer, "is_fast", False):
        raise ModelError(f"{path}: the tokenizer is a slow ({type(tokenizer).__name__}) one; token classification "
                         "aligns words with a fast tokenizer's word_ids: save the checkpoint with a tokenizer.json.")
    id2label = model.config.id2label
    labels = [str(id2label[i]) for i in range(len(id2label))]
    model.eval().to(resolved)
    return TokenClassifier(model=model, tokenizer=tokenizer, labels=labels, path=path, device=resolved,
                           weights_sha256=weights_sha256(files), precision=weights)


@dataclass
class Encoded:
    """One sentence tokenized: sub-token ids (cut to the budget), the sub-token positions of each word (empty past
    the cut), the words' character offsets (raw text) and whether it was cut."""

    ids: list[int]
    word_positions: list[list[int]]
    offsets: list[tuple[int, int]] | None
    truncated: bool


def encode(tokenizer, items: Sequence, max_length: int) -> list[Encoded]:
    """Tokenize word lists (`is_split_into_words`) or raw texts; raw texts get their words from the tokenizer."""
    presplit = bool(items) and not isinstance(items[0], str)
    enc = tokenizer([list(x) for x in items] if presplit else list(items), is_split_into_words=presplit,
                    add_special_tokens=True, truncation=False, return_offsets_mapping=not presplit, verbose=False)
    out = []
    for i in range(len(items)):
        ids, word_ids = list(enc["input_ids"][i]), enc.word_ids(i)
        n_words = len(items[i]) if presplit else 1 + max((w for w in word_ids if w is not None), default=-1)
        cut = len(ids) > max_length
        keep = max_length - (1 if cut and word_ids[-1] is None else 0)  # keep the closing special token
        positions: list[list[int]] = [[] for _ in range(n_words)]
        offsets = None if presplit else [(-1, -1)] * n_words
        for pos, w in enumerate(word_ids):
            if w is None:
                continue
            if not presplit:
                s, e = enc["offset_mapping"][i][pos]
                old = offsets[w]
                offsets[w] = (s, e) if old[0] < 0 else (min(old[0], s), max(old[1], e))
            if pos < keep:
                positions[w].append(pos)
        if cut:
            ids = ids[:keep] + ([ids[-1]] if word_ids[-1] is None else [])
        out.append(Encoded(ids=ids, word_positions=positions, offsets=offsets, truncated=cut))
    return out


def predict(clf: TokenClassifier, encoded: Sequence[Encoded], gold: Sequence[Sequence[int]] | None, *,
            aggregation: str = "first", batch_size: int = TOKEN_BATCH,
            progress: Callable[[int], None] | None = None) -> list[dict]:
    """Per sentence: `pred` (tag ids), `confidence` (the predicted tag's probability), `loss` (per word, NaN past
    the cut or without gold), `vectors` [n_words, hidden] float32, `seen` (the word was within the cut)."""
    order = np.argsort([-len(e.ids) for e in encoded], kind="stable")
    results: list[dict] = [None] * len(encoded)  # type: ignore[list-item]
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        outs = predict_batch(clf, [encoded[i] for i in rows], None if gold is None else [gold[i] for i in rows],
                             aggregation)
        for i, out in zip(rows, outs):
            results[i] = out
        if progress:
            progress(len(rows))
    return results


def predict_batch(clf: TokenClassifier, batch: Sequence[Encoded], gold: Sequence[Sequence[int]] | None,
                  aggregation: str = "first") -> list[dict]:
    """One padded forward pass over a batch of encoded sentences (see `predict`)."""
    import torch

    width = max(len(e.ids) for e in batch)
    pad = clf.tokenizer.pad_token_id or 0
    ids = torch.full((len(batch), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for r, e in enumerate(batch):
        ids[r, :len(e.ids)] = torch.as_tensor(e.ids)
        mask[r, :len(e.ids)] = 1
    with torch.inference_mode():
        out = clf.model(input_ids=ids.to(clf.device), attention_mask=mask.to(clf.device), output_hidden_states=True)
    logits = out.logits.float().cpu()
    hidden = out.hidden_states[-1].float().cpu()
    outside = clf.labels.index(OUTSIDE) if OUTSIDE in clf.labels else 0
    results = []
    for r, e in enumerate(batch):
        n = len(e.word_positions)
        seen = np.array([bool(p) for p in e.word_positions], dtype=bool)
        word_logits = torch.zeros((n, logits.shape[-1]))
        vectors = np.zeros((n, hidden.shape[-1]), dtype=np.float32)
        for w, positions in enumerate(e.word_positions):
            if positions:
                word_logits[w] = _aggregate(logits[r, positions], aggregation)
                vectors[w] = hidden[r, positions].mean(0).numpy()
        logp = torch.log_softmax(word_logits, dim=-1)
        pred = logp.argmax(-1).numpy()
        pred[~seen] = outside
        confidence = logp.exp().max(-1).values.numpy().astype(np.float32)
        confidence[~seen] = np.nan
        loss = np.full(n, np.nan, dtype=np.float32)
        if gold is not None:
            g = torch.as_tensor(np.asarray(gold[r], dtype=np.int64))
            loss = (-logp.gather(1, g[:, None])[:, 0]).numpy().astype(np.float32)
            loss[~seen] = np.nan
        results.append({"pred": pred.astype(np.int64), "confidence": confidence, "loss": loss, "vectors": vectors,
                        "seen": seen})
    return results


def _aggregate(logits, aggregation: str):
    if aggregation == "first":
        return logits[0]
    if aggregation == "mean":
        return logits.mean(0)
    return logits.max(0).values
