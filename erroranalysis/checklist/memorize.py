"""What both memorization checks share (the classifier's in `overfit`, the causal LM's in `overfit_lm`): their
parameters, the training curve and result, and the bookkeeping of a training loop (batch order, gradient flow)."""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Iterator

import numpy as np

from erroranalysis.core.findings import Finding
from erroranalysis.core.params import SEED, Flag, Float, Int, Params, Text, param, spec_field
from erroranalysis.infer import runtime

ACCURACY_TARGET = 0.99  # memorized: this share of the examples right, and
LOSS_TARGET = 0.1  # the training loss at most this
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



def finite_json(value: Any) -> Any:
    """NaN/inf become None, so the result serializes as strict JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(v) for v in value]
    return value
