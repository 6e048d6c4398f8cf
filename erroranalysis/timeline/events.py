"""What happened to the error types and classes of a training run, in words: appeared, grew, fixed, came back,
a class's F1 dropping, output checks flat while the loss fell; each placed after the nearest landmark of the
training log (a learning-rate drop, a loss spike).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from erroranalysis.timeline.tracking import ErrorType, StepState

FIXED_SHARE = 0.5  # a type that vanished was "fixed" when at least this share of its last failures are right
GROWTH = 1.25  # a type "grew" when its peak is at least this many times its first size (and 3 failures more)
LR_DROP = 0.3  # a learning-rate drop: this relative fall in one logged interval, well above the usual change
CLASS_DROP = 0.1  # a class's F1 falling this much between two analyzed steps is an event
FLAT_CHECK = 0.05  # an output check whose pass rate rose less than this while the loss fell 20% is an event


@dataclass(frozen=True)
class Landmark:
    """Something the training log shows at `step`, as a phrase that ends with the step ("the learning rate dropped
    at 1,500")."""

    step: int
    kind: str
    phrase: str


def landmarks(signals: dict, findings: list[dict] = ()) -> list[Landmark]:
    """Learning-rate drops and the end of warm-up, from `signals` (name -> (steps, values)), and the steps the
    training-signal findings name (grad-norm spikes, NaN, divergence, overfitting onset), sorted by step."""
    marks = []
    lr = signals.get("learning_rate")
    if lr is not None:
        steps, values = (np.asarray(x, dtype=np.float64) for x in lr)
        ok = np.isfinite(values)
        steps, values = steps[ok], values[ok]
        if len(values) >= 3:
            drop = -np.diff(values)
            usual = float(np.median(np.abs(drop)))
            for i in np.flatnonzero((drop > LR_DROP * values[:-1]) & (drop > 5 * usual)):
                marks.append(Landmark(int(steps[i + 1]), "lr_drop", f"the learning rate dropped at {int(steps[i + 1]):,}"))
            top = int(np.argmax(values))
            if 0 < top < len(values) - 1 and values[top] >= 2 * values[0]:
                marks.append(Landmark(int(steps[top]), "warmup_end", f"the warm-up ended at {int(steps[top]):,}"))
    for f in findings:
        steps = [int(s) for s in f.get("steps") or []]
        if not steps:
            continue
        check, message = f.get("check"), str(f.get("message", ""))
        if check == "grad_spike":
            marks += [Landmark(s, check, f"a grad-norm spike at {s:,}") for s in steps]
        elif check == "non_finite":
            signal = message.split(" is ")[0]
            marks.append(Landmark(steps[0], check, f"the {signal} became {'NaN' if 'NaN' in message else 'inf'} "
                                                   f"at {steps[0]:,}"))
        elif check == "divergence":
            marks.append(Landmark(steps[0], check, f"the training loss started rising at {steps[0]:,}"))
        elif check == "overfitting":
            marks.append(Landmark(steps[0], check, f"the validation loss started rising at {steps[0]:,}"))
        elif check == "lr_zero":
            marks.append(Landmark(steps[0], check, f"the learning rate hit 0 at {steps[0]:,}"))
    return sorted(set(marks), key=lambda m: (m.step, m.kind))


def nearest(marks: list[Landmark], after: int | None, until: int, near: int) -> Landmark | None:
    """The landmark in (after, until] closest to step `near` (None when there is none)."""
    inside = [m for m in marks if (after is None or m.step > after) and m.step <= until]
    return min(inside, key=lambda m: (abs(m.step - near), m.step)) if inside else None


@dataclass(frozen=True)
class Event:
    """Something that happened at an analyzed step: kind is appeared, grew, returned, fixed, dissolved (gone, most
    of its failures still failing elsewhere), class_drop or checks_flat."""

    step: int
    kind: str
    text: str
    type_id: str | None = None

    def to_dict(self) -> dict:
        return {"step": self.step, "kind": self.kind, "type_id": self.type_id, "text": self.text}


def _around(steps: list[int], step: int) -> tuple[int | None, int]:
    """(the analyzed step before `step`, the one after it, or `step` itself when it is the last)."""
    i = steps.index(step)
    return (steps[i - 1] if i else None), (steps[i + 1] if i + 1 < len(steps) else step)


def _with(mark: Landmark | None, joiner: str = ", after ") -> str:
    return f"{joiner}{mark.phrase}" if mark else ""


def type_events(t: ErrorType, states: dict[int, StepState], steps: list[int], marks: list[Landmark]) -> list[Event]:
    """What happened to error type `t`: appeared, grew, gone (fixed or dissolved), came back."""
    events = []
    label = f"“{t.name}” ({t.type_id})"
    first = t.first_step
    if first != steps[0]:
        before, _ = _around(steps, first)
        events.append(Event(first, "appeared", f"{label} appeared at step {first:,} with {t.sizes[first]:,} "
                            f"failures{_with(nearest(marks, before, first, first))}", t.type_id))
    peak = t.peak_step
    if peak != first and t.sizes[peak] >= max(GROWTH * t.sizes[first], t.sizes[first] + 3):
        _, after = _around(steps, peak)
        mark = nearest(marks, _around(steps, peak)[0], after, peak)
        until = mark.phrase if mark else f"step {peak:,}"
        events.append(Event(peak, "grew", f"{label} grew from {t.sizes[first]:,} to {t.sizes[peak]:,} failures "
                            f"until {until}", t.type_id))
    present = set(t.steps)
    for i, s in enumerate(steps[1:], start=1):
        was, now = steps[i - 1] in present, s in present
        if was and not now:
            events.append(_gone(t, label, states[steps[i - 1]], states[s], marks, steps[i - 1]))
        elif now and not was and s > first:
            events.append(Event(s, "returned", f"{label} came back at step {s:,} with {t.sizes[s]:,} failures "
                                f"(last seen at step {max(x for x in present if x < s):,})"
                                f"{_with(nearest(marks, steps[i - 1], s, s))}", t.type_id))
    return events


def _gone(t: ErrorType, label: str, last: StepState, now: StepState, marks: list[Landmark], before: int) -> Event:
    members = last.clusters[t.clusters[last.step]]
    right = len(members - now.failing)
    mark = _with(nearest(marks, before, now.step, now.step))
    if right >= FIXED_SHARE * len(members):
        return Event(now.step, "fixed", f"{label} was fixed at step {now.step:,}: {right:,} of its {len(members):,} "
                     f"failures at step {last.step:,} are right{mark}", t.type_id)
    return Event(now.step, "dissolved", f"{label} dissolved at step {now.step:,}: {right:,} of its "
                 f"{len(members):,} failures at step {last.step:,} are right, the rest still fail (in other error "
                 f"types or unclustered){mark}", t.type_id)


def story(t: ErrorType, events: list[Event], steps: list[int]) -> str:
    """One sentence on the life of error type `t`, from its events."""
    mine = [e for e in events if e.type_id == t.type_id]
    label = f"“{t.name}” ({t.type_id})"
    first = t.first_step
    appeared = next((e for e in mine if e.kind == "appeared"), None)
    head = appeared.text if appeared else (f"{label} was there from the first analyzed step ({first:,}, "
                                           f"{t.sizes[first]:,} failures)")
    parts = [head]
    grew = next((e for e in mine if e.kind == "grew"), None)
    if grew:
        parts[0] += " and " + grew.text.removeprefix(f"{label} ")
    for e in mine:
        if e.kind in ("fixed", "dissolved", "returned"):
            parts.append("it " + e.text.removeprefix(f"{label} "))
    if steps[-1] in t.clusters and t.last_step != first:
        parts.append(f"at step {steps[-1]:,} it has {t.sizes[steps[-1]]:,} failures")
    return "; ".join(parts) + "."


def class_events(rows: list[dict], marks: list[Landmark]) -> list[Event]:
    """A class whose F1 fell by CLASS_DROP or more between two analyzed steps (`rows`: step, per_class_f1)."""
    events = []
    for prev, cur in zip(rows, rows[1:]):
        for label, f1 in (cur.get("per_class_f1") or {}).items():
            before = (prev.get("per_class_f1") or {}).get(label)
            if f1 is not None and before is not None and before - f1 >= CLASS_DROP:
                mark = _with(nearest(marks, prev["step"], cur["step"], cur["step"]))
                events.append(Event(cur["step"], "class_drop", f"F1 of class “{label}” fell from {before:.2f} to "
                                    f"{f1:.2f} at step {cur['step']:,}{mark}"))
    return events


def check_events(rows: list[dict], signals: dict) -> list[Event]:
    """For generation: the training loss fell 20% between the first and last analyzed step while an output check's
    pass rate rose less than FLAT_CHECK ("the loss falls but valid JSON does not rise")."""
    loss = signals.get("loss")
    if len(rows) < 2 or loss is None or not rows[0].get("checks"):
        return []
    steps, values = (np.asarray(x, dtype=np.float64) for x in loss)

    def at(step):
        ok = (steps <= step) & np.isfinite(values)
        return float(values[ok][-1]) if ok.any() else None

    first, last = rows[0], rows[-1]
    a, b = at(first["step"]), at(last["step"])
    if a is None or b is None or b > 0.8 * a:
        return []
    events = []
    for check, p0 in first["checks"].items():
        p1 = (last.get("checks") or {}).get(check)
        if p0 is not None and p1 is not None and p1 - p0 < FLAT_CHECK:
            events.append(Event(last["step"], "checks_flat", f"the training loss fell from {a:.3g} to {b:.3g} "
                                f"between steps {first['step']:,} and {last['step']:,}, but the {check} pass rate "
                                f"did not rise ({p0:.0%} → {p1:.0%})"))
    return events


def describe(types: list[ErrorType], states: list[StepState], rows: list[dict] = (), signals: dict | None = None,
             findings: list[dict] = ()) -> tuple[list[Event], dict[str, str]]:
    """(every event sorted by step, one sentence per error type id). `rows` are the steps' metrics (step,
    per_class_f1, checks), `signals` the training log (name -> (steps, values)), `findings` its Finding dicts."""
    signals = signals or {}
    marks = landmarks(signals, list(findings))
    by_step = {s.step: s for s in states}
    steps = sorted(s for s, state in by_step.items() if state.clusters)  # the steps that observe types
    events = [e for t in types for e in type_events(t, by_step, steps, marks)]
    events += class_events(sorted(rows, key=lambda r: r["step"]), marks)
    events += check_events(sorted(rows, key=lambda r: r["step"]), signals)
    order = {"appeared": 0, "returned": 1, "grew": 2, "fixed": 3, "dissolved": 4, "class_drop": 5, "checks_flat": 6}
    events.sort(key=lambda e: (e.step, order.get(e.kind, 9), e.type_id or ""))
    return events, {t.type_id: story(t, events, steps) for t in types}
