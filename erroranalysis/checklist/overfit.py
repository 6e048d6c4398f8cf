"""The memorization check: can this checkpoint, trained the way it is set up, memorize ~100 examples?

A model that cannot drive its training loss to ~0 on a handful of examples has a bug in its setup, not a
data-size problem. `overfit_check` fine-tunes an in-memory copy of the checkpoint (the files on disk are never
touched) on `n` examples with a plain torch loop (AdamW, fixed learning rate), records the training loss per
step and the loss and accuracy on the n examples after every epoch, and reports whether it memorized them.

When it does not, it says why, from evidence rather than guesses:

- frozen parameters: no trainable parameter, a tiny trainable share, or no gradient reaching the weights;
- learning rate: loss flat (too low, or too few steps) or rising / NaN (too high);
- labels shuffled against texts: a control run on a label-permuted copy of the same examples; real labels are
  learned clearly faster than random ones, so a run that learns no faster than its control has labels that
  carry no signal about their texts;
- padding or truncation eating the signal: share of examples cut at `max_length`, mean tokens, unknown
  tokens, and examples identical after tokenization but labeled differently (which no model can memorize).
"""

from __future__ import annotations

import copy
import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterator

import numpy as np

from erroranalysis.checklist.overfit_diagnosis import (
    ACCURACY_TARGET,
    LOSS_TARGET,
    diagnose,
)
from erroranalysis.core.findings import Finding
from erroranalysis.core.params import SEED, Flag, Float, Int, Params, Text, param, spec_field
from erroranalysis.infer import runtime

TASKS = ("classification", "generation")
DEFAULT_MAX_LENGTH = {"classification": 64, "generation": 512}


@dataclass
class Curve:
    """One training run: loss per step, and loss/accuracy on all n examples after each epoch (step 0 first)."""

    steps: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    grad_norm: list[float] = field(default_factory=list)
    eval_steps: list[int] = field(default_factory=list)
    eval_loss: list[float] = field(default_factory=list)
    eval_accuracy: list[float] = field(default_factory=list)

    def record(self, step: int, loss: float, grad_norm: float) -> None:
        self.steps.append(step)
        self.loss.append(loss)
        self.grad_norm.append(grad_norm)

    def record_eval(self, step: int, loss: float, accuracy: float) -> bool:
        """Add an evaluation on all examples; True once they are memorized (the early stop)."""
        self.eval_steps.append(step)
        self.eval_loss.append(loss)
        self.eval_accuracy.append(accuracy)
        return accuracy >= ACCURACY_TARGET and loss <= LOSS_TARGET

    @property
    def initial_loss(self) -> float:
        return self.eval_loss[0]

    @property
    def final_loss(self) -> float:
        return self.eval_loss[-1]

    @property
    def final_accuracy(self) -> float:
        return self.eval_accuracy[-1]

    def memorized(self) -> bool:
        return bool(self.final_accuracy >= ACCURACY_TARGET and self.final_loss <= LOSS_TARGET)

    def steps_to_memorize(self) -> int | None:
        for step, loss, acc in zip(self.eval_steps, self.eval_loss, self.eval_accuracy):
            if acc >= ACCURACY_TARGET and loss <= LOSS_TARGET:
                return step
        return None


@dataclass
class OverfitResult:
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
    labels: list[str]
    params: dict             # total, trainable, trainable_share, frozen (names, first few)
    gradients: dict          # tensors_without_gradient, total_norm_first_step
    inputs: dict             # mean_tokens, truncated_share, unk_share, conflicting_identical, reachable_accuracy
    curve: Curve
    control: Curve | None
    findings: list[Finding]

    @property
    def initial(self) -> dict:
        return {"loss": self.curve.initial_loss, "accuracy": self.curve.eval_accuracy[0]}

    @property
    def final(self) -> dict:
        return {"loss": self.curve.final_loss, "accuracy": self.curve.final_accuracy}

    def to_dict(self) -> dict:
        out = asdict(self)
        out["findings"] = [f.to_dict() for f in self.findings]
        out["initial"], out["final"] = self.initial, self.final
        out["steps_to_memorize"] = self.curve.steps_to_memorize()
        if self.control is not None:
            out["control"]["steps_to_memorize"] = self.control.steps_to_memorize()
        return finite_json(out)


@dataclass(frozen=True)
class OverfitParams(Params):
    """The memorization check: how many examples, how long, how fast, and the control run. They mean the same for
    a causal LM (`overfit_check(..., task="generation")`, `checklist.overfit_lm`)."""

    n: int = param(100, Int(2), "Examples to memorize (a seeded random sample).")
    steps: int | None = param(None, Int(1), "Optimizer steps.", none="20 epochs over the n examples, at least 30")
    lr: float = param(1e-4, Float(0, 10, low_open=True, high_open=True), "AdamW learning rate.")
    batch_size: int = param(16, Int(1), "Examples per step.")
    max_length: int | None = param(None, Int(2), "Tokens per example; longer texts are cut.",
                                   none=f"{DEFAULT_MAX_LENGTH['classification']} (classification) or "
                                        f"{DEFAULT_MAX_LENGTH['generation']} (generation: prompt and answer)")
    freeze: str | None = param(None, Text(), "Regex of parameter names to freeze, to mirror a training setup that "
                               "freezes them (e.g. '^bert\\.').", none="nothing frozen")
    control: bool = param(True, Flag(), "A control run on permuted labels (generation: answers permuted across "
                          "prompts): the shuffled-labels check; twice the time.")
    lora: bool = param(False, Flag(), "Generation: train LoRA adapters (peft; rank 16 on every linear layer) instead "
                       "of every weight, for larger models; raise --lr with it (1e-3 is usual).")
    device: str = spec_field(runtime.DEVICE)
    trust_remote_code: bool = spec_field(runtime.TRUST_REMOTE_CODE)
    seed: int = spec_field(SEED)

    def validate(self) -> None:
        if self.freeze is not None:
            try:
                re.compile(self.freeze)
            except re.error as exc:
                self.fail("freeze", self.freeze, f"a regular expression ({exc})")


def overfit_check(model, data, params: OverfitParams = OverfitParams(), *, data_opts=None,
                  progress: Callable[[int, int], None] | None = None, task: str = "classification",
                  **values) -> OverfitResult:
    """Fine-tune a copy of `model` (a checkpoint folder, or a loaded `inference.Classifier`) on `n` examples of
    `data` (an eval-set file) and report whether it memorizes them, with likely causes when it does not.
    `task="generation"`: a causal LM (folder, .gguf file or loaded `CausalLM`) on SFT rows, loss on the answer
    only (`checklist.overfit_lm.overfit_lm_check`, which returns an `LMOverfitResult`).

    `steps` defaults to 20 epochs over the n examples; `freeze` is a regex of parameter names to freeze, to
    mirror a training setup that freezes them (e.g. "^bert\\." for a BERT encoder). `params` (keyword values
    override it): see `OverfitParams`; `data_opts` (a DataOptions): the columns of `data`.
    """
    from erroranalysis.core.validation import check_choice
    from erroranalysis.infer.classifier import Classifier, load_classifier
    from erroranalysis.sources.table import DataOptions, map_labels, read_eval_set

    check_choice("task", task, TASKS)
    params = params.replace(**values) if values else params
    if params.lora and task != "generation":
        params.fail("lora", params.lora, "off unless the task is generation (LoRA adapters are for causal LMs here)")
    if task == "generation":
        from erroranalysis.checklist.overfit_lm import overfit_lm_check

        return overfit_lm_check(model, data, params, data_opts=data_opts, progress=progress)
    n, steps, lr, batch_size, seed, control, freeze = (
        params.n, params.steps, params.lr, params.batch_size, params.seed, params.control, params.freeze)
    max_length = params.max_length or DEFAULT_MAX_LENGTH["classification"]
    data_opts = data_opts if data_opts is not None else DataOptions()
    label_column = data_opts.label_column
    eval_set = read_eval_set(data, data_opts)
    clf = model if isinstance(model, Classifier) else load_classifier(model, device=params.device,
                                                                       trust_remote_code=params.trust_remote_code)
    frame = eval_set.frame
    gold = map_labels(frame["label"].to_numpy(), clf.labels, source=str(eval_set.path),
                      lines=frame["_line"].to_numpy(), column=label_column)
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.permutation(len(frame))[:n])
    texts = frame["text"].iloc[rows].astype(str).tolist()
    index = {label: i for i, label in enumerate(clf.labels)}
    label_ids = np.array([index[g] for g in gold[rows]], dtype=np.int64)
    epoch = math.ceil(len(rows) / batch_size)
    total_steps = steps if steps is not None else max(20 * epoch, 30)

    ids, inputs = _tokenize(clf, texts, label_ids, max_length)
    total = total_steps * (2 if control else 1)
    advance = (lambda done: progress(done, total)) if progress else None
    curve, params, gradients = train_copy(clf, ids, label_ids, steps=total_steps, lr=lr, batch_size=batch_size,
                                          seed=seed, freeze=freeze, eval_every=epoch, progress=advance)
    control_curve = None
    if control:
        shuffled = np.random.default_rng(seed + 1).permutation(label_ids)
        offset = (lambda done: progress(total_steps + done, total)) if progress else None
        control_curve, _, _ = train_copy(clf, ids, shuffled, steps=total_steps, lr=lr, batch_size=batch_size,
                                         seed=seed, freeze=freeze, eval_every=epoch, progress=offset)
    result = OverfitResult(
        memorized=curve.memorized(), model=str(clf.path), data=str(eval_set.path), n=len(rows), steps=total_steps,
        steps_run=curve.steps[-1] if curve.steps else 0, lr=float(lr), batch_size=batch_size,
        max_length=max_length, seed=seed, labels=list(clf.labels), params=params, gradients=gradients,
        inputs={**inputs, "n_classes_present": int(len(np.unique(label_ids))), "n_requested": n,
                "n_available": len(frame)},
        curve=curve, control=control_curve, findings=[])
    result.findings = diagnose(result)
    return result


def train_copy(clf, input_ids: list[list[int]], label_ids: np.ndarray, *, steps: int, lr: float, batch_size: int,
               seed: int = 0, freeze: str | None = None, eval_every: int | None = None,
               progress: Callable[[int], None] | None = None) -> tuple[Curve, dict, dict]:
    """Train a deep copy of `clf.model` on the examples; the original model is left as it was.

    Stops early once the examples are memorized. Returns (curve, parameter counts, gradient facts)."""
    import torch

    torch.manual_seed(seed)
    model = copy.deepcopy(clf.model)
    model.to(clf.device)
    if freeze:
        pattern = re.compile(freeze)
        for name, p in model.named_parameters():
            if pattern.search(name):
                p.requires_grad_(False)
    trainable, params = parameter_counts(model)
    gradients = no_gradients_yet()
    pad = clf.tokenizer.pad_token_id if clf.tokenizer.pad_token_id is not None else 0
    labels_t = torch.as_tensor(label_ids, device=clf.device)
    curve = Curve()
    eval_every = eval_every or max(1, math.ceil(len(input_ids) / batch_size))

    def measure(step: int) -> bool:
        return curve.record_eval(step, *_evaluate(model, input_ids, labels_t, pad, clf.device))

    measure(0)
    if not trainable:
        return curve, params, gradients
    optimizer = torch.optim.AdamW([p for _, p in trainable], lr=lr, weight_decay=0.0)
    batches = batch_order(len(input_ids), batch_size, seed)
    for step in range(1, steps + 1):
        batch = next(batches)
        model.train()
        ids_t, mask_t = _pad([input_ids[i] for i in batch], pad, clf.device)
        logits = model(input_ids=ids_t, attention_mask=mask_t).logits.float()
        loss = torch.nn.functional.cross_entropy(logits, labels_t[batch])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = record_gradients(trainable, step, gradients)
        optimizer.step()
        curve.record(step, float(loss.item()), grad_norm)
        if progress:
            progress(step)
        if not math.isfinite(curve.loss[-1]):
            measure(step)
            break
        if step % eval_every == 0 or step == steps:
            if measure(step):
                break
    model.zero_grad(set_to_none=True)
    del optimizer  # the copy goes with this frame; the optimizer's state first
    return curve, params, gradients


def parameter_counts(model) -> tuple[list, dict]:
    """(the trainable named parameters, their counts and the frozen ones, as the result reports them)."""
    named = list(model.named_parameters())
    trainable = [(name, p) for name, p in named if p.requires_grad]
    n_total, n_train = sum(p.numel() for _, p in named), sum(p.numel() for _, p in trainable)
    return trainable, {"total": int(n_total), "trainable": int(n_train),
                       "trainable_share": n_train / n_total if n_total else 0.0,
                       "frozen": [name for name, p in named if not p.requires_grad][:10],
                       "n_frozen_tensors": sum(not p.requires_grad for _, p in named)}


def no_gradients_yet() -> dict:
    return {"tensors_without_gradient": [], "n_tensors_without_gradient": 0, "total_norm_first_step": None}


def batch_order(n: int, batch_size: int, seed: int) -> Iterator[list[int]]:
    """Batches of indices into n examples, forever, each pass over them in a new random order."""
    rng = np.random.default_rng(seed)
    order: list[int] = []
    while True:
        if len(order) < batch_size:
            order += rng.permutation(n).tolist()
        batch, order = order[:batch_size], order[batch_size:]
        yield batch


def record_gradients(trainable: list, step: int, gradients: dict) -> float:
    """This step's total gradient norm; on the first step, which tensors got no gradient (the gradient-flow check)."""
    norms = [p.grad.detach().norm().item() if p.grad is not None else None for _, p in trainable]
    total = float(math.sqrt(sum(g * g for g in norms if g is not None)))
    if step == 1:
        missing = [name for (name, _), g in zip(trainable, norms) if g is None or g == 0.0]
        gradients.update(tensors_without_gradient=missing[:10], n_tensors_without_gradient=len(missing),
                         total_norm_first_step=total)
    return total


def _pad(seqs: list[list[int]], pad: int, device):
    import torch

    longest = max(len(s) for s in seqs)
    ids = np.full((len(seqs), longest), pad, dtype=np.int64)
    mask = np.zeros_like(ids)
    for row, seq in enumerate(seqs):
        ids[row, :len(seq)] = seq
        mask[row, :len(seq)] = 1
    return torch.from_numpy(ids).to(device), torch.from_numpy(mask).to(device)


def _evaluate(model, input_ids, labels_t, pad, device, batch_size: int = 64) -> tuple[float, float]:
    import torch

    model.eval()
    losses, correct = [], []
    with torch.no_grad():
        for start in range(0, len(input_ids), batch_size):
            ids_t, mask_t = _pad(input_ids[start:start + batch_size], pad, device)
            logits = model(input_ids=ids_t, attention_mask=mask_t).logits.float()
            gold = labels_t[start:start + batch_size]
            losses.append(torch.nn.functional.cross_entropy(logits, gold, reduction="none").cpu().numpy())
            correct.append((logits.argmax(1) == gold).cpu().numpy())
    loss = np.concatenate(losses)
    return float(loss.mean()), float(np.concatenate(correct).mean())


def _tokenize(clf, texts: list[str], label_ids: np.ndarray, max_length: int) -> tuple[list[list[int]], dict]:
    """Token ids cut to max_length, and what tokenization did to the inputs."""
    from erroranalysis.infer.classifier import tokenize

    tokenizer = clf.tokenizer
    model_max = getattr(clf.model.config, "max_position_embeddings", None)
    if model_max:
        max_length = min(max_length, int(model_max))
    full = tokenizer(texts, add_special_tokens=True, truncation=False, verbose=False)["input_ids"]
    ids, truncated = tokenize(tokenizer, texts, max_length)
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    unk = tokenizer.unk_token_id
    content = [sum(t not in special for t in seq) for seq in ids]
    n_tokens = sum(len(seq) for seq in ids)
    unk_count = sum(seq.count(unk) for seq in ids) if unk is not None else 0
    # identical inputs with different labels: no model can get them all right
    groups: dict[tuple, list[int]] = {}
    for seq, label in zip(ids, label_ids.tolist()):
        groups.setdefault(tuple(seq), []).append(label)
    conflicting = sum(len(v) for v in groups.values() if len(set(v)) > 1)
    reachable = sum(max(v.count(x) for x in set(v)) for v in groups.values()) / max(len(ids), 1)
    conflicting_truncated = sum(len(v) for k, v in groups.items() if len(set(v)) > 1 and len(k) >= max_length)
    return ids, {
        "max_length": int(max_length),
        "mean_tokens": float(np.mean([len(s) for s in full])) if full else 0.0,
        "mean_tokens_after_cut": float(np.mean([len(s) for s in ids])) if ids else 0.0,
        "mean_content_tokens": float(np.mean(content)) if content else 0.0,
        "truncated_share": float(truncated.mean()) if len(truncated) else 0.0,
        "unk_share": unk_count / n_tokens if n_tokens else 0.0,
        "conflicting_identical": int(conflicting),
        "conflicting_identical_truncated": int(conflicting_truncated),
        "reachable_accuracy": float(reachable),
        "pad_token_defined": tokenizer.pad_token_id is not None
                             or getattr(clf.model.config, "pad_token_id", None) is not None,
    }


def finite_json(value: Any) -> Any:
    """NaN/inf become None, so the result serializes as strict JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(v) for v in value]
    return value
