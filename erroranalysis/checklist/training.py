"""Training signals: find what went wrong in the run that produced the checkpoint.

Detectors are pure functions of a `TrainingLog`; each returns `Finding`s that say where (the steps, so the batches
to inspect), what, and what to do.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from erroranalysis.checklist.training_log import SIGNAL_NAMES, Signal, TrainingLog
from erroranalysis.core.findings import SEVERITIES, Finding


def find_non_finite(log: TrainingLog) -> list[Finding]:
    """NaN or inf in any signal: the first bad step is where to look."""
    findings = []
    for name, signal in log.signals.items():
        bad = ~np.isfinite(signal.values)
        if not bad.any():
            continue
        steps = signal.steps[bad]
        kind = "NaN" if np.isnan(signal.values[bad][0]) else "inf"
        findings.append(Finding(
            "non_finite", "error", _steps(steps),
            f"{SIGNAL_NAMES[name]} is {kind} at step {steps[0]}"
            + (f" and {len(steps) - 1} later logged step(s)" if len(steps) > 1 else ""),
            f"Inspect the batch at step {steps[0]} for empty or corrupt inputs; lower the learning rate, enable "
            "gradient clipping (max_grad_norm) and check fp16 overflow (try bf16)."))
    return findings


def find_flat_loss(log: TrainingLog, min_drop: float = 0.05) -> list[Finding]:
    """Training loss that ends less than `min_drop` (relative) below where it started."""
    loss = _finite("loss", log)
    if loss is None or len(loss) < 5:
        return []
    start, end = _edge_medians(loss.values)
    if end < start * (1 - min_drop):
        return []
    return [Finding(
        "loss_not_decreasing", "warning", (int(loss.steps[0]), int(loss.steps[-1])),
        f"training loss did not decrease: {start:.4g} at the start, {end:.4g} at the end (step {loss.steps[-1]})",
        "Check that the learning rate is not ~0, that parameters are not frozen and that labels match their "
        "inputs; see whether the model can memorize ~100 examples ('erroranalysis overfit').")]


def find_divergence(log: TrainingLog, min_rise: float = 0.2) -> list[Finding]:
    """Training loss that fell, then rose by more than half of what it had gained and by `min_rise` (relative)."""
    loss = _finite("loss", log)
    if loss is None or len(loss) < 5:
        return []
    smooth = _smooth(loss.values)
    low = int(np.argmin(smooth))
    start, bottom, end = smooth[0], smooth[low], smooth[-1]
    if not (end > bottom + 0.5 * (start - bottom) and end > bottom * (1 + min_rise)):
        return []
    return [Finding(
        "divergence", "error", (int(loss.steps[low]), int(loss.steps[-1])),
        f"training loss diverged: it fell to {bottom:.4g} at step {loss.steps[low]}, then rose to {end:.4g} "
        f"by step {loss.steps[-1]}",
        f"Lower the learning rate, add warm-up and gradient clipping; the checkpoint nearest step "
        f"{loss.steps[low]} is the best one this run made.")]


def find_grad_spikes(log: TrainingLog, z_threshold: float = 6.0, min_ratio: float = 2.0) -> list[Finding]:
    """Grad norms far above their neighbours: a robust z-score of log grad norm around a rolling median,
    where the norm also jumped `min_ratio`-fold from the previous logged step."""
    grad = _finite("grad_norm", log)
    if grad is None or len(grad) < 5:
        return []
    g = np.log(np.maximum(grad.values, 1e-12))
    residual = g - _smooth(g, window=21)
    mad = np.median(np.abs(residual - np.median(residual)))
    z = residual / max(1.4826 * mad, 1e-3)  # a perfectly smooth log has MAD 0
    # A spike also jumps from the previous logged value: an early, slowly decaying norm is not one.
    jump = np.diff(g, prepend=np.inf) > math.log(min_ratio)
    spikes = np.flatnonzero((z > z_threshold) & (residual > math.log(min_ratio)) & jump)
    if not spikes.size:
        return []
    shown = ", ".join(f"{grad.steps[i]} ({grad.values[i]:.3g}, {math.exp(residual[i]):.0f}x usual)"
                      for i in spikes[:5])
    return [Finding(
        "grad_spike", "warning", _steps(grad.steps[spikes]),
        f"grad norm spiked at {len(spikes)} logged step(s): {shown}" + (", ..." if len(spikes) > 5 else ""),
        "Inspect the batches at these steps (same seed, same data order) for outliers or bad labels; enable "
        "gradient clipping (max_grad_norm) or lower the learning rate.")]


def find_lr_problems(log: TrainingLog, zero_share: float = 0.1) -> list[Finding]:
    """Learning rate stuck at zero, constant, without warm-up or never decaying."""
    lr = _finite("learning_rate", log)
    if lr is None or len(lr) < 3:
        return []
    v = lr.values
    first, last = _zero_run(v)
    if last - first + 1 >= max(2, zero_share * len(v)):
        return [Finding(
            "lr_zero", "error", (int(lr.steps[first]), int(lr.steps[last])),
            f"learning rate is 0 from step {lr.steps[first]} to step {lr.steps[last]}: the model does not learn there",
            "Check the scheduler (num_training_steps, warm-up longer than the run) and the optimizer's lr.")]
    peak = v.max()
    if v.min() >= 0.99 * peak:
        return [Finding("lr_constant", "info", (int(lr.steps[0]),),
                        f"learning rate is constant at {peak:.3g}: no warm-up and no decay",
                        "Fine-tuning usually benefits from a short warm-up and a decaying schedule "
                        "(warmup_ratio=0.06, lr_scheduler_type='linear').")]
    findings = []
    if v[0] >= 0.99 * peak:
        findings.append(Finding("lr_no_warmup", "info", (int(lr.steps[0]),),
                                f"no warm-up: the learning rate starts at its peak ({peak:.3g} at step {lr.steps[0]})",
                                "Add a short warm-up (warmup_ratio=0.06), especially for large learning rates."))
    if v[-1] >= 0.9 * peak:
        findings.append(Finding("lr_no_decay", "info", (int(lr.steps[-1]),),
                                f"the learning rate never decays: {v[-1]:.3g} at the last step, peak {peak:.3g}",
                                "A decaying schedule (linear or cosine) usually ends training at a lower loss."))
    return findings


def find_overfitting(log: TrainingLog, min_rise: float = 0.05) -> list[Finding]:
    """The step after which validation loss rises (by `min_rise`, relative) while training loss keeps falling."""
    loss, val = _finite("loss", log), _finite("eval_loss", log)
    if loss is None or val is None or len(val) < 3:
        return []
    best = int(np.argmin(val.values))
    step, low, end = int(val.steps[best]), val.values[best], val.values[-1]
    if best == len(val) - 1 or end <= low * (1 + min_rise):
        return []
    before, after = loss.values[loss.steps <= step], loss.values[loss.steps > step]
    if not (before.size and after.size) or np.median(after[-max(1, after.size // 4):]) >= _tail(before):
        return []  # training loss rose too: that is divergence, not overfitting
    return [Finding(
        "overfitting", "warning", (step,),
        f"validation loss is lowest at step {step} ({low:.4g}) and rises to {end:.4g} by step {val.steps[-1]} "
        "while training loss keeps falling: overfitting starts there",
        f"Keep the checkpoint from step {step} (load_best_model_at_end with metric_for_best_model='eval_loss'), "
        "train fewer steps, or add regularization or data.")]


def find_train_val_gap(log: TrainingLog, max_ratio: float = 2.0, min_gap: float = 0.1) -> list[Finding]:
    """Validation loss far above training loss at the last evaluation."""
    loss, val = _finite("loss", log), _finite("eval_loss", log)
    if loss is None or val is None:
        return []
    step, v = int(val.steps[-1]), val.values[-1]
    train = _tail(loss.values[loss.steps <= step]) if (loss.steps <= step).any() else loss.values[0]
    if not (v > max_ratio * train and v - train > min_gap):
        return []
    return [Finding(
        "train_val_gap", "warning", (step,),
        f"validation loss ({v:.4g}) is {v / max(train, 1e-12):.1f}x the training loss ({train:.4g}) at step {step}: "
        "the model fits its training data much better than unseen data",
        "Check train/eval distribution shift and leakage; add regularization, data or augmentation, "
        "or stop earlier.")]


DETECTORS = (find_non_finite, find_flat_loss, find_divergence, find_grad_spikes, find_lr_problems,
             find_overfitting, find_train_val_gap)


def diagnose(log: TrainingLog) -> list[Finding]:
    """Every detector's findings, most severe first."""
    findings = [f for detector in DETECTORS for f in detector(log)]
    if any(f.check == "divergence" for f in findings):  # a diverged loss is also "not decreasing": say it once
        findings = [f for f in findings if f.check != "loss_not_decreasing"]
    return sorted(findings, key=lambda f: SEVERITIES.index(f.severity))


def training_report(log: TrainingLog) -> dict:
    """A JSON-serializable report: where the log came from, a summary per signal, and the findings."""
    return {"source": log.path, "format": log.format,
            "signals": {name: summarize(signal) for name, signal in log.signals.items()},
            "findings": [f.to_dict() for f in diagnose(log)]}


def summarize(signal: Signal) -> dict:
    """Points, step range, and first/last/min finite value of one signal (None where nothing is finite)."""
    ok = signal.finite()
    out = {"points": len(signal), "non_finite": len(signal) - len(ok),
           "first_step": int(signal.steps[0]), "last_step": int(signal.steps[-1])}
    if len(ok):
        low = int(np.argmin(ok.values))
        out.update(first=float(ok.values[0]), last=float(ok.values[-1]), min=float(ok.values[low]),
                   min_step=int(ok.steps[low]))
    else:
        out.update(first=None, last=None, min=None, min_step=None)
    return out


def _finite(name: str, log: TrainingLog) -> Signal | None:
    signal = log.get(name)
    if signal is None:
        return None
    signal = signal.finite()
    return signal if len(signal) else None


def _smooth(values: np.ndarray, window: int | None = None) -> np.ndarray:
    """Centred rolling median: robust to single noisy points, so trends and spikes stand out."""
    window = window or max(5, len(values) // 20)
    return pd.Series(values).rolling(window, center=True, min_periods=1).median().to_numpy()


def _edge_medians(values: np.ndarray) -> tuple[float, float]:
    k = max(3, len(values) // 10)
    return float(np.median(values[:k])), float(np.median(values[-k:]))


def _tail(values: np.ndarray) -> float:
    return float(np.median(values[-max(3, len(values) // 10):]))


def _zero_run(values: np.ndarray) -> tuple[int, int]:
    """First and last index of the longest run of zeros (last < first when there is none)."""
    best, start = (0, -1), None
    for i, is_zero in enumerate(np.append(values == 0, False)):
        if is_zero and start is None:
            start = i
        elif not is_zero and start is not None:
            if i - start > best[1] - best[0] + 1:
                best = (start, i - 1)
            start = None
    return best


def _steps(steps: np.ndarray) -> tuple[int, ...]:
    return tuple(int(s) for s in steps)
