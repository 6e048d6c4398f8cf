"""Why a memorization check failed, from evidence: frozen parameters, the learning rate, labels that carry no
signal (the shuffled-labels control), padding or truncation eating the signal.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from erroranalysis.errors import preview
from erroranalysis.findings import SEVERITIES, Finding

ACCURACY_TARGET = 0.99
LOSS_TARGET = 0.1
FLAT_RATIO = 0.9          # final/initial loss above this: the loss did not move
DIVERGED_RATIO = 1.5      # final/initial loss above this (or NaN): the loss diverged
SHUFFLED_RATIO = 0.85     # real/control mean loss above this: real labels learned no faster than random ones

if TYPE_CHECKING:
    from erroranalysis.checklist.overfit import Curve, OverfitResult


# Below this many examples random labels are nearly as easy to memorize, so the control is weak evidence: on MiniLM
# with real labels (benchmarks/overfit.py --n N), real/control mean loss was 0.92 at n=16, 0.84 at 32, 0.67 at 100.
CONTROL_MIN_N = 40
TRUNCATED_NOTABLE = 0.5
UNK_NOTABLE = 0.1
MIN_TOKENS = 3
TRAINABLE_NOTABLE = 0.05


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
