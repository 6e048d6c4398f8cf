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
from typing import Any, Callable

import numpy as np

from erroranalysis.errors import check_param, preview
from erroranalysis.training import SEVERITIES, Finding

ACCURACY_TARGET = 0.99
LOSS_TARGET = 0.1
FLAT_RATIO = 0.9          # final/initial loss above this: the loss did not move
DIVERGED_RATIO = 1.5      # final/initial loss above this (or NaN): the loss diverged
SHUFFLED_RATIO = 0.85     # real/control mean loss above this: real labels learned no faster than random ones
# Below this many examples random labels are nearly as easy to memorize, so the control is weak evidence: on MiniLM
# with real labels (benchmarks/overfit.py --n N), real/control mean loss was 0.92 at n=16, 0.84 at 32, 0.67 at 100.
CONTROL_MIN_N = 40
TRUNCATED_NOTABLE = 0.5
UNK_NOTABLE = 0.1
MIN_TOKENS = 3
TRAINABLE_NOTABLE = 0.05


@dataclass
class Curve:
    """One training run: loss per step, and loss/accuracy on all n examples after each epoch (step 0 first)."""

    steps: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    grad_norm: list[float] = field(default_factory=list)
    eval_steps: list[int] = field(default_factory=list)
    eval_loss: list[float] = field(default_factory=list)
    eval_accuracy: list[float] = field(default_factory=list)

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
        return _finite_json(out)


def overfit_check(model, data, *, n: int = 100, steps: int | None = None, lr: float = 1e-4, batch_size: int = 16,
                  max_length: int = 64, seed: int = 0, control: bool = True, freeze: str | None = None,
                  device: str = "auto", text_column: str = "text", label_column: str = "label",
                  encoding: str = "utf-8", split: str | None = None, trust_remote_code: bool = False,
                  progress: Callable[[int, int], None] | None = None) -> OverfitResult:
    """Fine-tune a copy of `model` (a checkpoint folder, or a loaded `inference.Classifier`) on `n` examples of
    `data` (an eval-set file) and report whether it memorizes them, with likely causes when it does not.

    `steps` defaults to 20 epochs over the n examples; `freeze` is a regex of parameter names to freeze, to
    mirror a training setup that freezes them (e.g. "^bert\\." for a BERT encoder).
    """
    from erroranalysis.data import load_eval_set, map_labels
    from erroranalysis.inference import Classifier, load_classifier

    check_param("n", n, isinstance(n, int) and n >= 2, "an integer >= 2")
    check_param("steps", steps, steps is None or (isinstance(steps, int) and steps >= 1), "an integer >= 1")
    check_param("lr", lr, isinstance(lr, (int, float)) and 0 < lr < 10 and math.isfinite(lr), "a number in (0, 10)")
    check_param("batch_size", batch_size, isinstance(batch_size, int) and batch_size >= 1, "an integer >= 1")
    check_param("max_length", max_length, isinstance(max_length, int) and max_length >= 2, "an integer >= 2")
    if freeze is not None:
        try:
            re.compile(freeze)
        except re.error as exc:
            check_param("freeze", freeze, False, f"a regular expression ({exc})")
    eval_set = load_eval_set(data, text_column=text_column, label_column=label_column, encoding=encoding, split=split)
    clf = model if isinstance(model, Classifier) else load_classifier(model, device=device,
                                                                       trust_remote_code=trust_remote_code)
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


# -- training ---------------------------------------------------------------------------------------------------


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
    named = list(model.named_parameters())
    trainable = [(name, p) for name, p in named if p.requires_grad]
    n_total = sum(p.numel() for _, p in named)
    n_train = sum(p.numel() for _, p in trainable)
    params = {"total": int(n_total), "trainable": int(n_train),
              "trainable_share": n_train / n_total if n_total else 0.0,
              "frozen": [name for name, p in named if not p.requires_grad][:10],
              "n_frozen_tensors": sum(not p.requires_grad for _, p in named)}
    gradients = {"tensors_without_gradient": [], "n_tensors_without_gradient": 0, "total_norm_first_step": None}
    pad = clf.tokenizer.pad_token_id if clf.tokenizer.pad_token_id is not None else 0
    labels_t = torch.as_tensor(label_ids, device=clf.device)
    curve = Curve()
    eval_every = eval_every or max(1, math.ceil(len(input_ids) / batch_size))

    def measure(step: int) -> bool:
        loss, acc = _evaluate(model, input_ids, labels_t, pad, clf.device)
        curve.eval_steps.append(step)
        curve.eval_loss.append(loss)
        curve.eval_accuracy.append(acc)
        return acc >= ACCURACY_TARGET and loss <= LOSS_TARGET

    measure(0)
    if not trainable:
        return curve, params, gradients
    optimizer = torch.optim.AdamW([p for _, p in trainable], lr=lr, weight_decay=0.0)
    order_rng = np.random.default_rng(seed)
    order: list[int] = []
    for step in range(1, steps + 1):
        if len(order) < batch_size:
            order += order_rng.permutation(len(input_ids)).tolist()
        batch, order = order[:batch_size], order[batch_size:]
        model.train()
        ids_t, mask_t = _pad([input_ids[i] for i in batch], pad, clf.device)
        logits = model(input_ids=ids_t, attention_mask=mask_t).logits.float()
        loss = torch.nn.functional.cross_entropy(logits, labels_t[batch])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        norms = [p.grad.detach().norm().item() if p.grad is not None else None for _, p in trainable]
        if step == 1:
            missing = [name for (name, _), g in zip(trainable, norms) if g is None or g == 0.0]
            gradients.update(tensors_without_gradient=missing[:10], n_tensors_without_gradient=len(missing),
                             total_norm_first_step=float(math.sqrt(sum(g * g for g in norms if g is not None))))
        optimizer.step()
        curve.steps.append(step)
        curve.loss.append(float(loss.item()))
        curve.grad_norm.append(float(math.sqrt(sum(g * g for g in norms if g is not None))))
        if progress:
            progress(step)
        if not math.isfinite(curve.loss[-1]):
            measure(step)
            break
        if step % eval_every == 0 or step == steps:
            if measure(step):
                break
    model.zero_grad(set_to_none=True)
    del model, optimizer
    return curve, params, gradients


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
    from erroranalysis.inference import tokenize

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


# -- diagnosis --------------------------------------------------------------------------------------------------


def diagnose(result: OverfitResult) -> list[Finding]:
    """Likely causes, most severe first. When the examples were memorized, only facts worth knowing remain."""
    out: list[Finding] = []
    c, ok = result.curve, result.memorized
    params, grads, inputs = result.params, result.gradients, result.inputs
    if ok:
        out.append(Finding("memorized", "info", (c.steps_to_memorize() or c.eval_steps[-1],),
                           f"memorized {result.n} examples in {c.steps_to_memorize()} steps: loss "
                           f"{c.initial_loss:.3g} -> {c.final_loss:.3g}, accuracy {c.eval_accuracy[0]:.0%} -> "
                           f"{c.final_accuracy:.0%}",
                           "The model and optimization can learn: look at the data and the training run next."))
    else:
        out.append(Finding("not_memorized", "error", (c.eval_steps[-1],),
                           f"did not memorize {result.n} examples in {result.steps_run} steps: loss "
                           f"{c.initial_loss:.3g} -> {c.final_loss:.3g}, accuracy {c.eval_accuracy[0]:.0%} -> "
                           f"{c.final_accuracy:.0%} (target: {ACCURACY_TARGET:.0%} and loss <= {LOSS_TARGET})",
                           "Fix the causes below before training longer or on more data: a setup that cannot "
                           "memorize 100 examples will not learn from 100,000."))
    # frozen parameters
    if params["trainable"] == 0:
        out.append(Finding("no_trainable_parameters", "error", (),
                           f"no parameter is trainable: all {params['n_frozen_tensors']} weight tensors have "
                           "requires_grad=False, so the optimizer changes nothing",
                           "Unfreeze the model (requires_grad=True) or at least its classification head; check "
                           "the code (or --freeze pattern) that freezes layers."))
    elif params["trainable_share"] < TRAINABLE_NOTABLE:
        out.append(Finding("mostly_frozen", "info" if ok else "warning", (),
                           f"only {params['trainable_share']:.1%} of the {params['total']:,} parameters train "
                           f"(frozen: {preview(params['frozen'], 3)})",
                           "A frozen encoder limits what the head can fit: unfreeze the top layers if the loss "
                           "plateaus."))
    elif grads["total_norm_first_step"] == 0.0:
        out.append(Finding("no_gradient", "error", (1,),
                           "the gradient is exactly zero on every trainable weight: nothing flows back from the "
                           "loss", "Check that the loss depends on the model's outputs (no .detach(), no "
                           "torch.no_grad() around the forward pass) and that logits are not constant."))
    if not ok and params["trainable"]:
        finals = [x for x in c.eval_loss if math.isfinite(x)]
        diverged = (not all(math.isfinite(x) for x in c.loss + c.eval_loss)
                    or (finals and finals[-1] > DIVERGED_RATIO * c.initial_loss))
        if diverged:
            out.append(Finding("lr_too_high", "error", (c.steps[-1],),
                               f"the loss diverged (from {c.initial_loss:.3g} to "
                               f"{_fmt(c.loss[-1])} by step {c.steps[-1]}) at lr={result.lr:g}: the learning rate is "
                               "probably too high", f"Try --lr {result.lr / 10:g}; add warm-up and gradient clipping "
                               "to the real training."))
        elif c.final_loss > FLAT_RATIO * c.initial_loss and grads["total_norm_first_step"]:
            out.append(Finding("lr_too_low", "warning", (c.steps[-1],),
                               f"the loss barely moved ({c.initial_loss:.3g} -> {c.final_loss:.3g} in "
                               f"{result.steps_run} steps) at lr={result.lr:g}: the learning rate is probably too "
                               "low, or the steps too few", f"Try --lr {result.lr * 10:g} or more --steps."))
        elif len(c.eval_loss) >= 3 and c.eval_loss[-1] < c.eval_loss[-2] < c.eval_loss[-3]:
            out.append(Finding("too_few_steps", "warning", (c.steps[-1],),
                               f"the loss was still falling when the {result.steps_run} steps ran out "
                               f"({c.final_loss:.3g})", f"Run more --steps, or raise --lr (now {result.lr:g})."))
    # labels shuffled against texts
    if result.control is not None and params["trainable"]:
        real, ctrl = mean_losses(c, result.control)
        learned = c.final_loss < FLAT_RATIO * c.initial_loss or result.control.final_loss < FLAT_RATIO * result.control.initial_loss
        if learned and real >= SHUFFLED_RATIO * ctrl:
            weak = result.n < CONTROL_MIN_N
            out.append(Finding("labels_look_shuffled", "warning" if ok or weak else "error", (),
                               f"the real labels are learned no faster than randomly permuted ones (mean loss "
                               f"{real:.3g} vs {ctrl:.3g} on the control): the labels carry no signal about their texts"
                               + (f"; with only {result.n} examples this is weak evidence, since random labels are "
                                  "nearly as easy to memorize" if weak else ""),
                               "Check that labels stay aligned with texts through loading, shuffling and joining "
                               "(a sort or shuffle applied to one column only), and that the label column is the "
                               "right one." + (f" Rerun with --n {CONTROL_MIN_N * 2} or more to be sure." if weak else "")))
    # padding and truncation
    if inputs["conflicting_identical"]:
        cut = inputs["conflicting_identical_truncated"]
        out.append(Finding("identical_inputs_conflict", "warning" if ok else "error", (),
                           f"{inputs['conflicting_identical']} examples are identical after tokenization"
                           + (f" ({cut} of them cut at max_length={inputs['max_length']})" if cut else "")
                           + f" but carry different labels: at most {inputs['reachable_accuracy']:.0%} accuracy "
                           "is reachable", "Raise --max-length if the cut made them identical; otherwise the labels "
                           "conflict: fix them."))
    if inputs["truncated_share"] >= TRUNCATED_NOTABLE:
        out.append(Finding("truncation", "info" if ok else "warning", (),
                           f"{inputs['truncated_share']:.0%} of the examples are cut at max_length="
                           f"{inputs['max_length']} (mean {inputs['mean_tokens']:.0f} tokens before the cut)",
                           "If the signal sits after the cut, the model never sees it: raise --max-length, or keep "
                           "the informative part of the text (head+tail) in training."))
    if inputs["unk_share"] >= UNK_NOTABLE:
        out.append(Finding("unknown_tokens", "warning", (),
                           f"{inputs['unk_share']:.0%} of the tokens are the unknown token: the tokenizer does not "
                           "fit this text", "Check that the tokenizer is the checkpoint's own and that the text "
                           "encoding is right (--encoding)."))
    if inputs["mean_content_tokens"] < MIN_TOKENS:
        out.append(Finding("few_tokens", "warning", (),
                           f"the examples hold {inputs['mean_content_tokens']:.1f} tokens on average besides special "
                           "tokens: there is almost nothing to learn from", "Check the text column (--text-column) "
                           "and that the texts are not emptied by preprocessing."))
    if not inputs["pad_token_defined"]:
        out.append(Finding("no_pad_token", "warning", (),
                           "neither the tokenizer nor the model config defines a padding token",
                           "Set tokenizer.pad_token (e.g. to eos) and model.config.pad_token_id, or padded "
                           "positions may be read as content."))
    if inputs["n_classes_present"] < 2:
        out.append(Finding("single_class", "info", (),
                           f"all {result.n} examples carry the same label: memorizing them proves little",
                           "Use an eval set with several classes, or a larger --n."))
    return sorted(out, key=lambda f: SEVERITIES.index(f.severity))


def mean_losses(real: Curve, control: Curve) -> tuple[float, float]:
    """Mean loss over the evaluations both runs made (a run that stopped early, memorized, keeps its last
    loss for the evaluations it skipped), so the two areas under the curves compare like for like."""
    length = max(len(real.eval_loss), len(control.eval_loss))

    def padded(curve: Curve) -> np.ndarray:
        values = np.array([x if math.isfinite(x) else np.inf for x in curve.eval_loss], dtype=np.float64)
        return np.r_[values, np.full(length - len(values), values[-1])]

    return float(padded(real).mean()), float(padded(control).mean())


def _fmt(value: float) -> str:
    return f"{value:.3g}" if math.isfinite(value) else str(value)


def _finite_json(value: Any) -> Any:
    """NaN/inf become None, so the result serializes as strict JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_json(v) for v in value]
    return value


def ascii_curve(values: list[float], width: int = 40) -> str:
    """A one-line sparkline of a curve, for terminals and Markdown."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return ""
    if len(values) > width:
        idx = np.linspace(0, len(values) - 1, width).round().astype(int)
        values = [values[i] for i in idx]
    lo, hi = min(finite), max(finite)
    bars = "▁▂▃▄▅▆▇█"
    span = hi - lo if hi > lo else 1.0
    return "".join("×" if not math.isfinite(v) else bars[int(round((v - lo) / span * (len(bars) - 1)))]
                   for v in values)
