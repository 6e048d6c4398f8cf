"""Why a memorization check failed, from evidence: frozen parameters, the learning rate, labels that carry no
signal (the shuffled-labels control), padding or truncation eating the signal.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from erroranalysis.core.errors import preview
from erroranalysis.core.findings import SEVERITIES, Finding

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
    out += parameter_findings(params, grads, ok, what="its classification head")
    if not ok and params["trainable"]:
        out += learning_rate_findings(c, result.lr, result.steps_run, grads)
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


def parameter_findings(params: dict, grads: dict, ok: bool, what: str = "its classification head") -> list[Finding]:
    """Frozen weights: nothing trainable, a tiny trainable share, or no gradient reaching the weights."""
    out = []
    if params["trainable"] == 0:
        out.append(Finding("no_trainable_parameters", "error", (),
                           f"no parameter is trainable: all {params['n_frozen_tensors']} weight tensors have "
                           "requires_grad=False, so the optimizer changes nothing",
                           f"Unfreeze the model (requires_grad=True) or at least {what}; check "
                           "the code (or --freeze pattern) that freezes layers."))
    elif params["trainable_share"] < TRAINABLE_NOTABLE and not params.get("adapters"):
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
    return out


def learning_rate_findings(c: Curve, lr: float, steps_run: int, grads: dict) -> list[Finding]:
    """Why an unmemorized run's loss went where it went: diverged (lr too high), flat (too low), still falling."""
    finals = [x for x in c.eval_loss if math.isfinite(x)]
    diverged = (not all(math.isfinite(x) for x in c.loss + c.eval_loss)
                or (finals and finals[-1] > DIVERGED_RATIO * c.initial_loss))
    if diverged:
        return [Finding("lr_too_high", "error", (c.steps[-1],),
                        f"the loss diverged (from {c.initial_loss:.3g} to "
                        f"{_fmt(c.loss[-1])} by step {c.steps[-1]}) at lr={lr:g}: the learning rate is "
                        "probably too high", f"Try --lr {lr / 10:g}; add warm-up and gradient clipping "
                        "to the real training.")]
    if c.final_loss > FLAT_RATIO * c.initial_loss and grads["total_norm_first_step"]:
        return [Finding("lr_too_low", "warning", (c.steps[-1],),
                        f"the loss barely moved ({c.initial_loss:.3g} -> {c.final_loss:.3g} in "
                        f"{steps_run} steps) at lr={lr:g}: the learning rate is probably too "
                        "low, or the steps too few", f"Try --lr {lr * 10:g} or more --steps.")]
    if len(c.eval_loss) >= 3 and c.eval_loss[-1] < c.eval_loss[-2] < c.eval_loss[-3]:
        return [Finding("too_few_steps", "warning", (c.steps[-1],),
                        f"the loss was still falling when the {steps_run} steps ran out "
                        f"({c.final_loss:.3g})", f"Run more --steps, or raise --lr (now {lr:g}).")]
    return []


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


PROMPT_ONLY_DROP = 0.5  # the trained loss halved while the answer loss stayed flat: the labels train the prompt


def diagnose_lm(result) -> list[Finding]:
    """Why a causal LM did not memorize its SFT examples (an `overfit_lm.LMOverfitResult`), in the checklist's
    words; most severe first."""
    out: list[Finding] = []
    c, ok, inputs = result.curve, result.memorized, result.inputs
    reproduced = sum(e["reproduced"] for e in result.examples)
    if ok:
        out.append(Finding("memorized", "info", (c.steps_to_memorize() or c.eval_steps[-1],),
                           f"memorized {result.n} examples in {c.steps_to_memorize() or result.steps_run} steps: "
                           f"answer loss {_fmt(c.initial_loss)} -> {_fmt(c.final_loss)}, greedy decoding reproduces "
                           f"{reproduced} of {result.n} answers exactly",
                           "The model, the masking and the optimizer can learn: look at the data and the training "
                           "run next."))
    else:
        out.append(Finding("not_memorized", "error", (c.eval_steps[-1],),
                           f"did not memorize {result.n} examples in {result.steps_run} steps: answer loss "
                           f"{_fmt(c.initial_loss)} -> {_fmt(c.final_loss)}, greedy decoding reproduces {reproduced} "
                           f"of {result.n} answers (target: {ACCURACY_TARGET:.0%}, loss <= {LOSS_TARGET})",
                           "Fix the causes below before training longer or on more data: a setup that cannot "
                           "memorize 32 answers will not learn from 100,000 rows."))
    nothing = inputs["trained_tokens"] == 0
    if nothing:
        out.append(Finding("nothing_trained", "error", (1,),
                           f"no token of the {result.n} examples carries a label (every label is -100): the loss is "
                           f"{_fmt(c.loss[0]) if c.loss else 'NaN'} from the first step and no weight changes",
                           "The masking removed the answer too: check the collator or the assistant/completion mask "
                           "(TRL's assistant_only_loss needs a template with {% generation %} markers), and that "
                           "labels are not set to -100 wholesale, e.g. by masking every pad token when pad == eos."))
    elif inputs["n_rows_without_trained_tokens"]:
        out.append(Finding("rows_without_trained_tokens", "warning", (),
                           f"{inputs['n_rows_without_trained_tokens']} of {result.n} rows have no labeled token "
                           f"(rows {preview(inputs['rows_without_trained_tokens'], 5)}): they cost compute and train "
                           "nothing", "Check their masking and length (the answer may lie past max_length)."))
    if not nothing:  # with no label there is no gradient either: nothing_trained says why
        out += parameter_findings(result.params, result.gradients, ok, what="the layers you mean to tune")
    elif not result.params["trainable"]:
        out += parameter_findings(result.params, result.gradients, ok, what="the layers you mean to tune")
    if not ok and result.params["trainable"] and not nothing:
        if _prompt_only(c):
            out.append(Finding("prompt_trained", "error", (c.steps[-1],),
                               f"the trained loss fell ({_fmt(c.loss[0])} -> {_fmt(c.loss[-1])}) while the answer "
                               f"loss did not ({_fmt(c.initial_loss)} -> {_fmt(c.final_loss)}): the loss falls on "
                               "prompt tokens only", "The labels cover the prompt, not the answer: mask the prompt "
                               "(-100) and keep the answer's labels (TRL: completion_only_loss / assistant_only_loss)."))
        else:
            out += learning_rate_findings(c, result.lr, result.steps_run, result.gradients)
    share = inputs.get("prompt_labeled_share")
    if share and not nothing:
        out.append(Finding("prompt_labeled", "info" if ok else "warning", (),
                           f"{share:.0%} of the prompt tokens carry labels: the loss is taken on the prompt too",
                           "Intended only for continued pre-training; for SFT mask the prompt so the model learns "
                           "the answers, not the questions."))
    if inputs["n_answer_dropped"] or inputs["n_answer_truncated"]:
        out.append(Finding("answer_truncated", "warning" if ok else "error", (),
                           f"max_length={inputs['max_length']} cuts the answer of {inputs['n_answer_truncated']} "
                           f"examples and leaves no answer token in {inputs['n_answer_dropped']}: those answers cannot "
                           "be memorized (nor their end-of-turn token learned)",
                           "Raise --max-length (and the trainer's max_length / max_seq_length), or shorten prompts."))
    if result.control is not None and result.params["trainable"] and not nothing:
        real, ctrl = mean_losses(c, result.control)
        learned = c.final_loss < FLAT_RATIO * c.initial_loss
        if learned and real >= SHUFFLED_RATIO * ctrl:
            out.append(Finding("answers_look_shuffled", "warning", (),
                               f"the answers are learned no faster than the same answers shuffled across prompts "
                               f"(mean answer loss {real:.3g} vs {ctrl:.3g} on the control): the answers may not "
                               "belong to their prompts",
                               "Check that prompts and answers stay aligned through loading, shuffling and joining; "
                               "on unrelated synthetic pairs this is expected."))
    return sorted(out, key=lambda f: SEVERITIES.index(f.severity))


def _prompt_only(c) -> bool:
    trained = [x for x in c.loss if math.isfinite(x)]
    return (len(trained) >= 2 and trained[-1] < PROMPT_ONLY_DROP * trained[0]
            and math.isfinite(c.final_loss) and c.final_loss > FLAT_RATIO * c.initial_loss)
