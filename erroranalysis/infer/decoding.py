"""The decoding loop every generating model shares: greedy or sampled (temperature, top-k, top-p, one seeded
generator), one token per step, rows leaving the batch at an end-of-sequence token, a stop string or the token
budget. What feeds a token to the model (a decoder-only KV cache, an encoder-decoder's decoder) is the caller's
`step` (`infer.generation`, `infer.seq2seq`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from erroranalysis.infer.causal_lm import CausalLM


def decode(lm: CausalLM, logits, opts, generator, step) -> list[dict]:
    """Greedy or sampled decoding (`opts`: the run's GenerationParams) from the first step's logits; rows leave the
    batch as they finish.

    `step(chosen, keep)` feeds each running row's chosen token to the model and returns the next logits; `keep`
    (None when every row runs on) indexes the rows still running, for the model's state to drop the others. The
    loop is the same for decoder-only and encoder-decoder models (`infer.seq2seq`)."""
    import torch

    b = logits.shape[0]
    device = logits.device
    eos = torch.as_tensor(lm.eos_ids or (-1,), device=device)
    active = torch.arange(b, device=device)  # original row of each row still in the batch
    tokens: list[list[int]] = [[] for _ in range(b)]
    logps: list[list[float]] = [[] for _ in range(b)]
    reason = ["length"] * b
    stops = opts.stop
    tail_tokens = max((len(s) for s in stops), default=0) + 2
    for i in range(opts.max_new_tokens):
        logp = torch.log_softmax(logits, dim=-1)
        chosen = choose_tokens(logits, opts, generator) if opts.do_sample else logits.argmax(-1)
        chosen_logp = logp.gather(1, chosen[:, None])[:, 0]
        done = torch.isin(chosen, eos)
        chosen_list, logp_list, done_list = chosen.tolist(), chosen_logp.tolist(), done.tolist()
        keep = []
        for k, row in enumerate(active.tolist()):
            if done_list[k]:
                reason[row] = "eos"
                continue
            tokens[row].append(chosen_list[k])
            logps[row].append(logp_list[k])
            if stops and any(s in lm.tokenizer.decode(tokens[row][-tail_tokens:], skip_special_tokens=True)
                             for s in stops):
                reason[row] = "stop"
                continue
            keep.append(k)
        if not keep or i == opts.max_new_tokens - 1:
            break
        index = None
        if len(keep) < len(active):
            index = torch.as_tensor(keep, device=device)
            active, chosen = active[index], chosen[index]
        logits = step(chosen, index)
    results = []
    for row in range(b):
        text = lm.tokenizer.decode(tokens[row], skip_special_tokens=True)
        if stops:
            cut = min((text.find(s) for s in stops if s in text), default=-1)
            if cut >= 0:
                text = text[:cut]
        loss = -float(np.mean(logps[row])) if logps[row] else float("nan")
        results.append({"output": text, "output_ids": tokens[row], "stop_reason": reason[row], "output_loss": loss})
    return results


def choose_tokens(logits, opts, generator):
    """Sample one token per row: temperature, then top-k, then top-p (nucleus)."""
    import torch

    scores = logits / opts.temperature
    if opts.top_k and opts.top_k < scores.shape[-1]:
        kth = torch.topk(scores, opts.top_k, dim=-1).values[:, -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if opts.top_p < 1.0:
        sorted_scores, sorted_idx = torch.sort(scores, descending=True, dim=-1)
        cum = torch.softmax(sorted_scores, dim=-1).cumsum(-1)
        remove = cum - torch.softmax(sorted_scores, dim=-1) > opts.top_p  # keep the smallest set reaching top_p
        sorted_scores = sorted_scores.masked_fill(remove, float("-inf"))
        scores = torch.full_like(scores, float("-inf")).scatter(1, sorted_idx, sorted_scores)
    probs = torch.softmax(scores, dim=-1)
    return torch.multinomial(probs, 1, generator=generator)[:, 0]
