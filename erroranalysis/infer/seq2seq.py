"""Generation with encoder-decoder models (T5, BART, mT5, Flan-T5): the same outputs as `infer.generation` gives
for causal LMs (output text and ids, stop reason, output loss, reference loss), so the generate stage, its output
checks and the prediction table do not know which kind of model ran.

Per batch: the prompts (right-padded) go through the encoder once; the reference answer is teacher-forced through
the decoder in one pass (`decoder_prefix + reference[:-1]` in, `reference` scored: the mean negative
log-likelihood per reference token, as for causal LMs); then `decoding.decode` decodes greedily or by sampling
with the decoder's cache, dropping finished rows from the cache and from the encoder states.

The prompt is the encoder's input, so the budget is the encoder's context alone (the answer has the decoder's);
a longer prompt is cut from the left and flagged, as for causal LMs.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from erroranalysis.infer.causal_lm import CausalLM
from erroranalysis.infer.decoding import decode
from erroranalysis.infer.generation import GenerationParams


def encode_batch(lm: CausalLM, prompt_ids: Sequence[Sequence[int]]):
    """Right-padded prompt ids and their mask, on the model's device."""
    import torch

    width = max(len(p) for p in prompt_ids)
    ids = torch.full((len(prompt_ids), width), lm.pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for r, seq in enumerate(prompt_ids):
        ids[r, :len(seq)] = torch.as_tensor(list(seq), dtype=torch.long)
        mask[r, :len(seq)] = 1
    return ids.to(lm.device), mask.to(lm.device)


def generate_batch(lm: CausalLM, prompt_ids: Sequence[Sequence[int]], opts: GenerationParams, *,
                   reference_ids: Sequence[Sequence[int] | None] | None = None, generator=None) -> list[dict]:
    """One batch: encode, reference loss, then decoding. Returns one dict per prompt, as `generation.generate_batch`."""
    import torch

    b = len(prompt_ids)
    ids, mask = encode_batch(lm, prompt_ids)
    with torch.inference_mode():
        encoded = lm.model.get_encoder()(input_ids=ids, attention_mask=mask)
        ref_loss = np.full(b, np.nan, np.float32)
        if reference_ids is not None and any(reference_ids):
            ref_loss = reference_losses(lm, encoded, mask, reference_ids)
        prefix = torch.as_tensor([list(lm.decoder_prefix)] * b, dtype=torch.long, device=lm.device)
        out = lm.model(encoder_outputs=encoded, attention_mask=mask, decoder_input_ids=prefix, use_cache=True)
        cache = _cache_of(out)
        logits = out.logits[:, -1, :].float()
        del out
        rows = decode(lm, logits, opts, generator, _decoder_step(lm, cache, encoded, mask))
    return [{**row, "reference_loss": float(ref_loss[r])} for r, row in enumerate(rows)]


def _cache_of(out):
    for name in ("cache", "past_key_values"):
        value = getattr(out, name, None)
        if value is not None:
            return value
    return None


def _decoder_step(lm: CausalLM, cache, encoded, mask):
    """The next-token logits of the decoder given each running row's last token (see `decoding.decode`)."""
    if cache is None:
        raise_no_cache(lm)
    state = {"hidden": encoded.last_hidden_state, "mask": mask}

    def step(chosen, keep):
        if keep is not None:
            cache.batch_select_indices(keep)
            state["hidden"], state["mask"] = state["hidden"][keep], state["mask"][keep]
        encoder_outputs = type(encoded)(last_hidden_state=state["hidden"])
        out = lm.model(encoder_outputs=encoder_outputs, attention_mask=state["mask"], decoder_input_ids=chosen[:, None],
                       use_cache=True, **{lm.cache_kwarg: cache})
        return out.logits[:, -1, :].float()

    return step


def raise_no_cache(lm: CausalLM) -> None:
    from erroranalysis.core.errors import ModelError

    raise ModelError(f"{lm.path}: the decoder returned no cache; erroranalysis generates with encoder-decoder "
                     "transformers that keep one (T5, BART, mT5).")


def _room(lm: CausalLM) -> int:
    """Most reference tokens the decoder can be fed after its prefix."""
    return max(lm.context_length - len(lm.decoder_prefix), 1)


def reference_losses(lm: CausalLM, encoded, mask, reference_ids: Sequence[Sequence[int] | None]) -> np.ndarray:
    """Mean negative log-likelihood per reference token, teacher-forced through the decoder in one pass; NaN where
    there is no reference. A reference longer than the decoder's context counts its first tokens."""
    import torch

    b = len(reference_ids)
    refs = [list(r)[:_room(lm)] if r else [] for r in reference_ids]
    prefix = list(lm.decoder_prefix)
    width = len(prefix) - 1 + max(len(r) for r in refs)
    tokens = torch.full((b, width), lm.pad_id, dtype=torch.long)
    step_mask = torch.zeros((b, width), dtype=torch.long)
    targets = torch.full((b, width), -1, dtype=torch.long)
    for r, ref in enumerate(refs):
        if ref:
            fed = prefix + ref[:-1]
            tokens[r, :len(fed)] = torch.as_tensor(fed)
            step_mask[r, :len(fed)] = 1
            targets[r, len(prefix) - 1:len(fed)] = torch.as_tensor(ref)
    out = lm.model(encoder_outputs=encoded, attention_mask=mask, decoder_input_ids=tokens.to(lm.device),
                   decoder_attention_mask=step_mask.to(lm.device), use_cache=False)
    logp = torch.log_softmax(out.logits.float(), dim=-1).cpu()
    valid = targets >= 0
    picked = logp.gather(2, targets.clamp(min=0)[..., None])[..., 0]
    total = -(picked * valid).sum(1).double()
    count = valid.sum(1).double()
    loss = (total / count.clamp(min=1)).numpy().astype(np.float32)
    loss[count.numpy() == 0] = np.nan
    return loss


def answer_losses(lm: CausalLM, prompt_ids: Sequence[Sequence[int]], answer_ids: Sequence[Sequence[int] | None], *,
                  batch_size: int = 8) -> np.ndarray:
    """Mean negative log-likelihood per answer token given its prompt (NaN where the answer is empty): the
    encoder-decoder counterpart of `generation.answer_losses`."""
    import torch

    n = len(prompt_ids)
    loss = np.full(n, np.nan, np.float32)
    rows_all = [i for i in range(n) if answer_ids[i]]
    for start in range(0, len(rows_all), batch_size):
        rows = rows_all[start:start + batch_size]
        ids, mask = encode_batch(lm, [prompt_ids[i] for i in rows])
        with torch.inference_mode():
            encoded = lm.model.get_encoder()(input_ids=ids, attention_mask=mask)
            loss[rows] = reference_losses(lm, encoded, mask, [answer_ids[i] for i in rows])
    return loss
