"""The memorization check for causal LMs: can this model, fine-tuned the way an SFT trainer would, memorize a few
supervised examples?

`overfit_lm_check` fine-tunes an in-memory copy of a causal LM (a safetensors folder or a GGUF file; the files are
never touched) on `n` SFT rows with the loss on the answer only, the way TRL's `assistant_only_loss` /
`completion_only_loss` set it up, and reports for every example its final answer loss and whether greedy decoding
from its prompt reproduces the answer token for token (up to and including the end-of-turn token).

Rows: `messages` (the last assistant turn is the answer, everything before it the prompt, rendered with the
tokenizer's chat template), or `prompt`/`completion` (strings: prompt and prompt + completion + EOS tokenized, the
completion where the two part, as TRL does; or lists of messages, rendered with the chat template). With `input_ids` and `labels` columns the rows are trained as
the user's own pipeline tokenized and masked them (the real thing to check: every label -100 shows here), and the
answer is read from the text columns when there are any, else from the labeled tokens.

The answer-only masking is `erroranalysis sft-check`'s (`checklist.sft_rows` renders through `erroranalysis.sft`):
`messages` rows as with `--assistant-only`, prompt/completion rows as TRL's default completion-only loss, so the
labels trained here are the spans sft-check reports as trained.

When the examples are not memorized, the findings say why, in the checklist's words: nothing trained (every label
masked: the loss is NaN or 0 from the first step), the loss falling on prompt tokens only, the learning rate too
low or too high, frozen parameters, answers cut by max_length, and answers learned no faster than the same answers
shuffled across prompts (the control).
"""

from __future__ import annotations

import copy
import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import numpy as np

from erroranalysis.checklist.memorize import (
    ACCURACY_TARGET,
    DEFAULT_MAX_LENGTH,
    LOSS_TARGET,
    Curve,
    OverfitParams,
    batch_order,
    finite_json,
    no_gradients_yet,
    parameter_counts,
    record_gradients,
)
from erroranalysis.checklist.sft_rows import IGNORE, Example, encode_rows, input_facts, shuffle_answers, through_eos
from erroranalysis.core.findings import Finding

LORA_RANK = 16
EVAL_BATCH = 16


@dataclass
class LMOverfitResult:
    memorized: bool
    model: str
    data: str
    n: int
    steps: int
    steps_run: int
    lr: float
    batch_size: int
    max_length: int
    seed: int
    lora: bool
    masking: str  # "answer only" or "given labels"
    params: dict
    gradients: dict
    inputs: dict
    curve: Curve
    control: Curve | None
    examples: list[dict]
    findings: list[Finding]
    task: str = "generation"
    labels: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["findings"] = [f.to_dict() for f in self.findings]
        out["initial"] = {"loss": self.curve.initial_loss, "accuracy": self.curve.eval_accuracy[0]}
        out["final"] = {"loss": self.curve.final_loss, "accuracy": self.curve.final_accuracy}
        out["steps_to_memorize"] = self.curve.steps_to_memorize()
        return finite_json(out)


def overfit_lm_check(model, data, params: OverfitParams = OverfitParams(), *, data_opts=None,
                     progress: Callable[[int, int], None] | None = None) -> LMOverfitResult:
    """Fine-tune a copy of the causal LM `model` (a folder, a .gguf file or a loaded `CausalLM`) on `params.n` SFT
    rows of `data` and report whether it memorizes their answers (see the module's docstring)."""
    from erroranalysis.checklist.overfit_diagnosis import diagnose_lm
    from erroranalysis.infer.causal_lm import CausalLM, load_causal_lm
    from erroranalysis.sources.table import as_source, read_table

    encoding = getattr(data_opts, "encoding", "utf-8") if data_opts is not None else "utf-8"
    split = getattr(data_opts, "split", None) if data_opts is not None else None
    raw, _ = read_table(as_source(data), encoding=encoding, split=split)  # a bad file fails before the model loads
    lm = model if isinstance(model, CausalLM) else load_causal_lm(model, device=params.device, precision="fp32",
                                                                 trust_remote_code=params.trust_remote_code)
    max_length = min(params.max_length or DEFAULT_MAX_LENGTH["generation"], lm.context_length)
    rows = np.sort(np.random.default_rng(params.seed).permutation(len(raw))[:params.n])
    examples = encode_rows(lm, raw, [int(i) for i in rows], str(data), max_length)
    epoch = math.ceil(len(examples) / params.batch_size)
    total_steps = params.steps if params.steps is not None else max(20 * epoch, 30)
    inputs = input_facts(examples, max_length)
    control = params.control and not inputs["given_labels"]
    total = total_steps * (2 if control else 1)
    run = _Trainer(lm, params, total_steps, epoch)
    curve, counts, gradients, trained = run.train(examples, _offset(progress, 0, total))
    finals = per_example(lm, trained, examples)
    del trained
    control_curve = None
    if control:
        shuffled = shuffle_answers(lm, examples, params.seed + 1, max_length)
        control_curve, _, _, other = run.train(shuffled, _offset(progress, total_steps, total))
        del other
    memorized = bool(finals and np.mean([e["reproduced"] for e in finals]) >= ACCURACY_TARGET
                     and curve.final_loss <= LOSS_TARGET)
    result = LMOverfitResult(
        memorized=memorized, model=str(lm.path), data=str(data), n=len(examples), steps=total_steps,
        steps_run=curve.steps[-1] if curve.steps else 0, lr=float(params.lr), batch_size=params.batch_size,
        max_length=max_length, seed=params.seed, lora=params.lora,
        masking="given labels" if inputs["given_labels"] else "answer only", params=counts, gradients=gradients,
        inputs={**inputs, "n_requested": params.n, "n_available": len(raw)}, curve=curve, control=control_curve,
        examples=finals, findings=[])
    result.findings = diagnose_lm(result)
    return result


def _offset(progress, start: int, total: int):
    return (lambda done: progress(start + done, total)) if progress else None


# -- training and scoring ---------------------------------------------------------------------------------------


class _Trainer:
    """Trains fresh copies of one loaded model with the check's parameters."""

    def __init__(self, lm, params: OverfitParams, steps: int, eval_every: int):
        self.lm, self.params, self.steps, self.eval_every = lm, params, steps, eval_every

    def copy(self):
        model = copy.deepcopy(self.lm.model)
        if self.params.freeze:
            pattern = re.compile(self.params.freeze)
            for name, p in model.named_parameters():
                if pattern.search(name):
                    p.requires_grad_(False)
        if self.params.lora:
            from peft import LoraConfig, get_peft_model

            model = get_peft_model(model, LoraConfig(r=LORA_RANK, lora_alpha=2 * LORA_RANK, lora_dropout=0.0,
                                                     target_modules="all-linear", task_type="CAUSAL_LM"))
        return model.to(self.lm.device)

    def train(self, examples: list[Example], progress=None) -> tuple[Curve, dict, dict, Any]:
        import torch

        torch.manual_seed(self.params.seed)
        model = self.copy()
        trainable, counts = parameter_counts(model)
        counts["adapters"] = self.params.lora
        gradients = no_gradients_yet()
        curve = Curve()

        def measure(step: int) -> bool:
            losses, exact = answer_scores(self.lm, model, examples)
            return curve.record_eval(step, float(np.mean(losses)) if len(losses) else math.nan,
                                     float(np.mean(exact)) if len(exact) else 0.0)

        measure(0)
        if not trainable:
            return curve, counts, gradients, model
        optimizer = torch.optim.AdamW([p for _, p in trainable], lr=self.params.lr, weight_decay=0.0)
        batches = batch_order(len(examples), self.params.batch_size, self.params.seed)
        for step in range(1, self.steps + 1):
            batch = next(batches)
            model.train()
            loss = _batch_loss(self.lm, model, [examples[i] for i in batch])
            optimizer.zero_grad(set_to_none=True)
            if torch.isfinite(loss) and loss.requires_grad:
                loss.backward()
            grad_norm = record_gradients(trainable, step, gradients)
            optimizer.step()
            curve.record(step, float(loss.item()), grad_norm)
            if progress:
                progress(step)
            if not math.isfinite(curve.loss[-1]) or (step == 1 and curve.loss[-1] == 0.0):
                measure(step)  # nothing trains (every label masked) or it diverged: more steps change nothing
                break
            if step % self.eval_every == 0 or step == self.steps:
                if measure(step):
                    break
        model.zero_grad(set_to_none=True)
        del optimizer
        return curve, counts, gradients, model


def _pad(seqs: list[list[int]], value: int, device):
    import torch

    longest = max(len(s) for s in seqs)
    out = np.full((len(seqs), longest), value, dtype=np.int64)
    mask = np.zeros_like(out)
    for row, seq in enumerate(seqs):
        out[row, :len(seq)] = seq
        mask[row, :len(seq)] = 1
    return torch.from_numpy(out).to(device), torch.from_numpy(mask).to(device)


def _batch_loss(lm, model, batch: list[Example]):
    """Mean cross-entropy over the labeled tokens of the batch, labels shifted as transformers' models shift them
    (NaN when no token is labeled: that is what a trainer sees when every label is -100)."""
    import torch

    ids, mask = _pad([e.train_ids or [lm.pad_id] for e in batch], lm.pad_id, lm.device)
    labels, _ = _pad([e.train_labels or [IGNORE] for e in batch], IGNORE, lm.device)
    logits = model(input_ids=ids, attention_mask=mask).logits.float()
    return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                             labels[:, 1:].reshape(-1), ignore_index=IGNORE)


def answer_scores(lm, model, examples: list[Example]) -> tuple[np.ndarray, np.ndarray]:
    """Per example: mean loss on its answer tokens given its prompt (teacher forcing), and whether every answer
    token is the model's argmax there, which is exactly when greedy decoding reproduces the answer."""
    import torch

    model.eval()
    losses, exact = [], []
    scored = [e for e in examples if e.answer_ids]
    with torch.no_grad():
        for start in range(0, len(scored), EVAL_BATCH):
            chunk = scored[start:start + EVAL_BATCH]
            seqs = [(e.prompt_ids + e.answer_ids)[:lm.context_length] for e in chunk]
            ids, mask = _pad(seqs, lm.pad_id, lm.device)
            logits = model(input_ids=ids, attention_mask=mask).logits.float()
            logp = torch.log_softmax(logits, dim=-1)
            for row, e in enumerate(chunk):
                first, last = max(len(e.prompt_ids), 1), len(seqs[row])
                target = ids[row, first:last]
                pred = logp[row, first - 1:last - 1]
                nll = -pred.gather(1, target[:, None])[:, 0]
                losses.append(float(nll.mean()) if len(nll) else math.nan)
                exact.append(bool((pred.argmax(-1) == target).all()) and last - len(e.prompt_ids) ==
                             len(e.answer_ids))
    by_example = {id(e): (l, x) for e, l, x in zip(scored, losses, exact)}
    out_loss = np.array([by_example.get(id(e), (math.nan, False))[0] for e in examples], dtype=np.float64)
    out_exact = np.array([by_example.get(id(e), (math.nan, False))[1] for e in examples], dtype=bool)
    return out_loss, out_exact


def per_example(lm, model, examples: list[Example]) -> list[dict]:
    """Each example's final answer loss, and what greedy decoding from its prompt writes (whether it is the
    answer, token for token through the end of turn)."""
    import torch

    losses, _ = answer_scores(lm, model, examples)
    out = []
    model.eval()
    with torch.no_grad():
        for e, loss in zip(examples, losses):
            written: list[int] = []
            if e.answer_ids and e.prompt_ids:
                prompt = torch.tensor([e.prompt_ids], device=lm.device)
                generated = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt),
                                           max_new_tokens=len(e.answer_ids) + 1, do_sample=False,
                                           eos_token_id=list(lm.eos_ids) or None, pad_token_id=lm.pad_id)
                written = through_eos(generated[0, len(e.prompt_ids):].tolist(), lm.eos_ids)
            out.append({"row": e.row, "line": e.line, "answer": e.answer_text,
                        "output": lm.tokenizer.decode(written, skip_special_tokens=True),
                        "reproduced": bool(e.answer_ids) and written == e.answer_ids,
                        "final_loss": float(loss), "n_answer_tokens": len(e.answer_ids),
                        "n_trained_tokens": int(sum(y != IGNORE for y in e.train_labels)),
                        "answer_cut": len(e.prompt_ids) + len(e.answer_ids) > len(e.train_ids)
                                      and not e.given_labels})
    return out
