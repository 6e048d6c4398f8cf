"""Batched generation with a KV cache, and teacher-forced losses.

`generate_batch` is "a batch of prompts in, a batch of outputs out" with the model loaded once by the caller, so the
same function runs in-process and under a distributed engine. Per batch it:

1. left-pads the prompts and runs them through the model once (prefill), keeping the KV cache;
2. teacher-forces the reference answer on a copy of that cache: the reference loss costs only its own tokens;
3. decodes greedily or by sampling (temperature, top-k, top-p, seeded) from the cache, one token per step for the
   rows still running, recording the log-probability of every generated token: the output loss comes for free.

Rows stop at an end-of-sequence token, at a stop string, or after `max_new_tokens`. Finished rows are dropped from
the cache, so a batch costs what its longest answer costs, not more.

Prompts longer than the context are cut from the left (the end of a prompt, where the question usually is, is
kept) and flagged `truncated`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from erroranalysis.core.errors import DataError, ModelError
from erroranalysis.core.params import SEED, Flag, Float, Int, Strings, Text, param, spec_field
from erroranalysis.infer import runtime
from erroranalysis.infer.causal_lm import CausalLM
from erroranalysis.infer.decoding import decode
from erroranalysis.infer.output_checks import CHECKERS
from erroranalysis.infer.scorers import ScorerParams

GENERATION_BATCH = 16  # prompts per batch when --batch-size is not given
LOSS_CHUNK = 128  # reference tokens teacher-forced per forward pass (bounds the logits held at once)


GENERATION = "Generation (--task generation)"  # the help panel of these options on `run`, `watch`, `analyze`


@dataclass(frozen=True)
class GenerationParams(ScorerParams):
    """How to generate, and what the generate stage checks in the outputs (generate() itself ignores those; the
    free-form scorers' thresholds come from `ScorerParams`)."""

    max_new_tokens: int = param(64, Int(1), "Tokens to generate per prompt.", panel=GENERATION)
    do_sample: bool = param(False, Flag(), "Sample (seeded) instead of greedy decoding.", flag="--sample",
                            panel=GENERATION)
    temperature: float = param(1.0, Float(0, low_open=True), "Sampling temperature.", panel=GENERATION)
    top_k: int = param(0, Int(0), "Sample from the k most likely tokens (0: off).", panel=GENERATION)
    top_p: float = param(1.0, Float(0, 1, low_open=True), "Nucleus sampling (1.0: off).", panel=GENERATION)
    seed: int = spec_field(SEED)
    stop: tuple[str, ...] = param((), Strings(repeat=True, blank=True), "Stop string (repeatable).",
                                  panel=GENERATION)
    batch_size: int | None = spec_field(runtime.BATCH_SIZE)
    max_prompt_tokens: int | None = param(None, Int(1), "Longer prompts are cut from the left and flagged.",
                                          none="the model's context minus --max-new-tokens", panel=GENERATION)
    chat_template: bool = param(True, Flag(), "Apply the tokenizer's chat template to prompts when it has one.",
                                panel=GENERATION)
    precision: str = spec_field(runtime.PRECISION)
    device: str = spec_field(runtime.DEVICE)
    trust_remote_code: bool = spec_field(runtime.TRUST_REMOTE_CODE)
    output_checks: tuple[str, ...] | None = param(
        None, Strings(choices=tuple(CHECKERS)), "Comma-separated output checks.",
        none="chosen from the eval set's columns", panel=GENERATION)
    labels: tuple[str, ...] = param((), Strings(), "Comma-separated allowed labels beyond the gold ones.",
                                    flag="--extra-labels", panel=GENERATION)
    regex: str | None = param(None, Text(), "Pattern every output must match (rows without a regex cell).",
                              none="no pattern", panel=GENERATION)
    reference_column: str = param("reference", Text(), "Column of the reference answer.", panel=GENERATION)
    messages_column: str = param("messages", Text(), "Column of chat messages.", panel=GENERATION)

    @property
    def rows_per_batch(self) -> int:
        """Prompts per batch: `batch_size`, or 16 (what None resolves to for generation)."""
        return self.batch_size or GENERATION_BATCH

    def describe(self) -> dict:
        """The parameters that decide the outputs, for the manifest."""
        return {"max_new_tokens": self.max_new_tokens, "do_sample": self.do_sample,
                "temperature": self.temperature if self.do_sample else None,
                "top_k": self.top_k if self.do_sample else None, "top_p": self.top_p if self.do_sample else None,
                "seed": self.seed, "stop": list(self.stop), "batch_size": self.rows_per_batch,
                "max_prompt_tokens": self.max_prompt_tokens, "chat_template": self.chat_template,
                "regex": self.regex, "extra_labels": list(self.labels), **self.project(ScorerParams).record()}


def render_prompt(lm: CausalLM, prompt: str | None = None, messages: list[dict] | None = None,
                  chat_template: bool = True) -> tuple[str, bool]:
    """The text the model sees, and whether it already holds the special tokens (a rendered chat template).

    `messages` require a chat template; a plain `prompt` is wrapped as one user message when the tokenizer has one
    and `chat_template` is on, and used as is otherwise.
    """
    if messages is not None:
        if not lm.has_chat_template:
            raise ModelError(f"{lm.path}: the tokenizer has no chat template, so the 'messages' column cannot be "
                             "rendered; use a 'prompt' column or a chat model.")
        return _apply_template(lm, messages), True
    if chat_template and lm.has_chat_template:
        return _apply_template(lm, [{"role": "user", "content": prompt or ""}]), True
    return prompt or "", False


def _apply_template(lm: CausalLM, messages: list[dict]) -> str:
    try:
        return lm.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    except Exception as exc:  # jinja raises TemplateError (and templates raise their own exceptions)
        raise ValueError(f"the chat template rejected these messages ({str(exc).splitlines()[0]})") from None


def encode_prompts(lm: CausalLM, texts: Sequence[str], templated: Sequence[bool],
                   max_prompt_tokens: int) -> tuple[list[list[int]], np.ndarray, np.ndarray]:
    """Token ids cut from the left to `max_prompt_tokens`, whether each was cut, and the length before cutting."""
    ids: list[list[int]] = [None] * len(texts)  # type: ignore[list-item]
    for flag in (True, False):
        rows = [i for i, t in enumerate(templated) if bool(t) == flag]
        if rows:
            enc = lm.tokenizer([texts[i] for i in rows], add_special_tokens=not flag, verbose=False)["input_ids"]
            for i, seq in zip(rows, enc):
                ids[i] = list(seq)
    start = lm.tokenizer.bos_token_id
    start = start if start is not None else (lm.eos_ids[0] if lm.eos_ids else lm.pad_id)
    for i, seq in enumerate(ids):
        if not seq:  # an empty prompt without special tokens: the model needs one token to start from
            ids[i] = [int(start)]
    full = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
    truncated = full > max_prompt_tokens
    for i in np.flatnonzero(truncated):
        ids[i] = ids[i][-max_prompt_tokens:]
    return ids, truncated, full


def encode_answers(lm: CausalLM, answers: Sequence[str | None]) -> list[list[int] | None]:
    """Token ids of reference answers (no special tokens); None where there is no answer."""
    rows = [i for i, a in enumerate(answers) if isinstance(a, str) and a != ""]
    out: list[list[int] | None] = [None] * len(answers)
    if rows:
        enc = lm.tokenizer([answers[i] for i in rows], add_special_tokens=False, verbose=False)["input_ids"]
        for i, seq in zip(rows, enc):
            out[i] = list(seq) or None
    return out


def prompt_budget(lm: CausalLM, opts: GenerationParams) -> int:
    """Most prompt tokens kept: --max-prompt-tokens, within the context minus the room for new tokens (an
    encoder-decoder's prompt has the encoder's whole context)."""
    room = lm.context_length - (0 if lm.encoder_decoder else opts.max_new_tokens)
    if room < 1:
        raise DataError(f"--max-new-tokens {opts.max_new_tokens} leaves no room for a prompt in the model's "
                        f"{lm.context_length}-token context; lower it.")
    return min(room, opts.max_prompt_tokens) if opts.max_prompt_tokens else room


def generate(lm: CausalLM, prompt_ids: Sequence[Sequence[int]], opts: GenerationParams, *,
             reference_ids: Sequence[Sequence[int] | None] | None = None,
             progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Generate for every prompt, in input order: output text and ids, stop reason, output and reference losses.

    Prompts are batched longest first (padding only within similar lengths); with sampling, one generator seeded
    with `opts.seed` drives every batch, so a run is reproducible for the same prompts, order and batch size.
    """
    import torch

    opts.validate()
    n = len(prompt_ids)
    lengths = np.fromiter((len(p) for p in prompt_ids), dtype=np.int64, count=n)
    order = np.argsort(-lengths, kind="stable")
    generator = None
    if opts.do_sample:
        generator = torch.Generator(device=lm.device).manual_seed(int(opts.seed))
    result: dict[str, Any] = {"output": [""] * n, "output_ids": [[] for _ in range(n)],
                              "stop_reason": [""] * n, "output_loss": np.full(n, np.nan, np.float32),
                              "reference_loss": np.full(n, np.nan, np.float32),
                              "n_output_tokens": np.zeros(n, np.int32)}
    batch = generate_batch
    if lm.encoder_decoder:
        from erroranalysis.infer import seq2seq

        batch = seq2seq.generate_batch
    for start in range(0, n, opts.rows_per_batch):
        rows = order[start:start + opts.rows_per_batch]
        refs = None if reference_ids is None else [reference_ids[i] for i in rows]
        outs = batch(lm, [prompt_ids[i] for i in rows], opts, reference_ids=refs, generator=generator)
        for i, out in zip(rows, outs):
            result["output"][i] = out["output"]
            result["output_ids"][i] = out["output_ids"]
            result["stop_reason"][i] = out["stop_reason"]
            result["output_loss"][i] = out["output_loss"]
            result["reference_loss"][i] = out["reference_loss"]
            result["n_output_tokens"][i] = len(out["output_ids"])
        if progress:
            progress(len(rows))
    return result


def generate_batch(lm: CausalLM, prompt_ids: Sequence[Sequence[int]], opts: GenerationParams, *,
                   reference_ids: Sequence[Sequence[int] | None] | None = None, generator=None) -> list[dict]:
    """One batch: prefill, reference loss on a copy of the cache, then decoding. Returns one dict per prompt."""
    import torch

    device = lm.device
    b = len(prompt_ids)
    width = max(len(p) for p in prompt_ids)
    ids = torch.full((b, width), lm.pad_id, dtype=torch.long)
    mask = torch.zeros((b, width), dtype=torch.long)
    for r, seq in enumerate(prompt_ids):
        if len(seq):
            ids[r, width - len(seq):] = torch.as_tensor(list(seq), dtype=torch.long)
            mask[r, width - len(seq):] = 1
    ids, mask = ids.to(device), mask.to(device)
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    with torch.inference_mode():
        out = lm.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1)
        cache = _cache_of(out)
        last = out.logits[:, -1, :].float()
        del out
        ref_loss = np.full(b, np.nan, np.float32)
        if reference_ids is not None and any(reference_ids):
            ref_loss = _reference_loss(lm, cache, last, mask, positions[:, -1], reference_ids)
        rows = decode(lm, last, opts, generator, _causal_step(lm, cache, mask, positions[:, -1]))
    return [{**row, "reference_loss": float(ref_loss[r])} for r, row in enumerate(rows)]


def _causal_step(lm: CausalLM, cache, mask, last_pos):
    """The next-token logits of a decoder-only model, given each running row's last token (see `decode`)."""
    import torch

    state = {"mask": mask, "positions": last_pos.clone()}

    def step(chosen, keep):
        if keep is not None:
            cache.batch_select_indices(keep)
            state["mask"], state["positions"] = state["mask"][keep], state["positions"][keep]
        state["positions"] = state["positions"] + 1
        ones = torch.ones((len(chosen), 1), dtype=state["mask"].dtype, device=chosen.device)
        state["mask"] = torch.cat([state["mask"], ones], dim=1)
        out = _forward_step(lm, cache, chosen[:, None], state["mask"], state["positions"][:, None], keep=1)
        return out.logits[:, -1, :].float()

    return step


def _cache_of(out):
    for name in ("cache", "past_key_values"):
        value = getattr(out, name, None)
        if value is not None:
            return value
    raise ModelError("the model returned no KV cache; erroranalysis generates with decoder-only transformers.")


def _forward_step(lm: CausalLM, cache, tokens, mask, positions, keep: int = 0):
    kwargs = {lm.cache_kwarg: cache}
    return lm.model(input_ids=tokens, attention_mask=mask, position_ids=positions, use_cache=True,
                    logits_to_keep=keep, **kwargs)


def _reference_loss(lm: CausalLM, cache, last_logits, mask, last_pos, reference_ids) -> np.ndarray:
    """Mean negative log-likelihood per reference token, teacher-forced after the prompt, on a copy of the cache."""
    import torch

    b = len(reference_ids)
    room = [max(lm.context_length - int(last_pos[r]) - 1, 1) for r in range(b)]
    refs = [list(r)[:room[i]] if r else [] for i, r in enumerate(reference_ids)]
    total = torch.zeros(b, dtype=torch.float64)
    count = torch.zeros(b, dtype=torch.float64)
    first = torch.log_softmax(last_logits, dim=-1).cpu()
    for r, ref in enumerate(refs):
        if ref:
            total[r] -= float(first[r, ref[0]])
            count[r] += 1
    longest = max((len(r) for r in refs), default=0)
    if longest > 1:
        cache = copy.deepcopy(cache)
        mask = mask.clone()
        # feed ref[:-1]; the logits at token j predict ref[j + 1]
        for start in range(0, longest - 1, LOSS_CHUNK):
            stop = min(start + LOSS_CHUNK, longest - 1)
            width = stop - start
            tokens = torch.full((b, width), lm.pad_id, dtype=torch.long)
            step_mask = torch.zeros((b, width), dtype=torch.long)
            targets = torch.full((b, width), -1, dtype=torch.long)
            for r, ref in enumerate(refs):
                part = ref[start:min(stop, len(ref) - 1)]
                if part:
                    tokens[r, :len(part)] = torch.as_tensor(part)
                    step_mask[r, :len(part)] = 1
                    targets[r, :len(part)] = torch.as_tensor(ref[start + 1:start + 1 + len(part)])
            device = mask.device
            mask = torch.cat([mask, step_mask.to(device)], dim=1)
            positions = (last_pos[:, None] + 1 + start + torch.arange(width, device=device)[None, :])
            out = _forward_step(lm, cache, tokens.to(device), mask, positions)
            logp = torch.log_softmax(out.logits.float(), dim=-1).cpu()
            del out
            valid = targets >= 0
            picked = logp.gather(2, targets.clamp(min=0)[..., None])[..., 0]
            total -= (picked * valid).sum(1).double()
            count += valid.sum(1).double()
    loss = (total / count.clamp(min=1)).numpy().astype(np.float32)
    loss[count.numpy() == 0] = np.nan
    return loss


def answer_losses(lm: CausalLM, prompt_ids: Sequence[Sequence[int]], answer_ids: Sequence[Sequence[int] | None], *,
                  batch_size: int = 8) -> np.ndarray:
    """Mean negative log-likelihood per answer token given its prompt, by plain teacher forcing (one forward pass
    over prompt + answer per example, batched with left padding). NaN where the answer is empty. An answer that
    does not fit in the context after its prompt counts only its first tokens, as in `generate`."""
    import torch

    if lm.encoder_decoder:
        from erroranalysis.infer import seq2seq

        return seq2seq.answer_losses(lm, prompt_ids, answer_ids, batch_size=batch_size)

    n = len(prompt_ids)
    loss = np.full(n, np.nan, np.float32)
    rows_all = [i for i in range(n) if answer_ids[i]]
    rows_all.sort(key=lambda i: -(len(prompt_ids[i]) + len(answer_ids[i])))
    for start in range(0, len(rows_all), batch_size):
        rows = rows_all[start:start + batch_size]
        seqs = []
        for i in rows:  # as in generation: the whole prompt, and the answer's first tokens that fit the context
            prompt = list(prompt_ids[i])
            seqs.append((prompt, list(answer_ids[i])[:max(lm.context_length - len(prompt), 1)]))
        width = max(len(p) + len(a) for p, a in seqs)
        keep = max(len(a) for _, a in seqs) + 1
        ids = torch.full((len(rows), width), lm.pad_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        target_mask = torch.zeros((len(rows), width), dtype=torch.bool)
        for r, (p, a) in enumerate(seqs):
            seq = p + a
            ids[r, width - len(seq):] = torch.as_tensor(seq)
            mask[r, width - len(seq):] = 1
            target_mask[r, width - len(a):] = True
            if not p:
                target_mask[r, width - len(a)] = False  # the first token has nothing to be predicted from
        ids, mask = ids.to(lm.device), mask.to(lm.device)
        positions = (mask.cumsum(1) - 1).clamp(min=0)
        keep = min(keep, width)
        with torch.inference_mode():
            logits = lm.model(input_ids=ids, attention_mask=mask, position_ids=positions,
                              logits_to_keep=keep).logits.float()
        logp = torch.log_softmax(logits[:, :-1], dim=-1).cpu()  # positions width-keep .. width-2
        targets = ids[:, width - keep + 1:].cpu()
        valid = target_mask[:, width - keep + 1:]
        picked = logp.gather(2, targets[..., None])[..., 0]
        total = -(picked * valid).sum(1).double()
        count = valid.sum(1).double()
        for r, i in enumerate(rows):
            if count[r] > 0:
                loss[i] = float(total[r] / count[r])
    return loss
