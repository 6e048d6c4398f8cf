"""erroranalysis.timeline: error types matched across steps, training-signal landmarks and events in words (pure)."""

from __future__ import annotations

import numpy as np
import pytest

from erroranalysis import timeline as tl
from erroranalysis.timeline import StepState


def ids(prefix: str, n: int, start: int = 0) -> frozenset:
    return frozenset(f"{prefix}{i:03d}" for i in range(start, start + n))


def unit(v) -> np.ndarray:
    v = np.asarray(v, dtype=np.float32)
    return v / np.linalg.norm(v)


def state(step: int, clusters: dict, *, extra_failing=frozenset(), centroids=None, labels=None, embedder="minilm"):
    failing = frozenset().union(*clusters.values()) | extra_failing if clusters else frozenset(extra_failing)
    return StepState(step=step, name=tl.step_name(step), failing=failing, clusters=dict(clusters),
                     names={c: f"cluster {c} at {step}" for c in clusters}, centroids=centroids or {},
                     embedder=embedder if centroids else None, labels=labels or {})


def test_step_names_are_shared_by_the_callback_and_watch():
    assert tl.step_name(500) == "step-000500" and tl.step_of("step-000500") == 500
    assert tl.checkpoint_step("checkpoint-500") == 500
    assert tl.step_of(tl.step_name(tl.checkpoint_step("checkpoint-1234567"))) == 1234567
    assert tl.step_of("step-5x") is None and tl.checkpoint_step("checkpoint-") is None and tl.step_of("run") is None


def test_a_type_that_shrinks_because_it_is_being_fixed_keeps_its_identity():
    a, b = ids("a", 40), ids("b", 30)
    steps = [state(100, {0: a, 1: b}),
             state(200, {3: b, 0: frozenset(sorted(a)[:10]) | ids("x", 2)}),  # most of a was fixed; ids renumbered
             state(300, {2: b}, extra_failing=ids("a", 1))]  # one of a's 12 still fails, unclustered
    types = tl.track(steps)
    assert len(types) == 2, [t.to_dict() for t in types]
    ta = next(t for t in types if t.clusters[100] == 0)
    tb = next(t for t in types if t.clusters[100] == 1)
    assert ta.clusters == {100: 0, 200: 0} and ta.sizes == {100: 40, 200: 12}
    assert tb.clusters == {100: 1, 200: 3, 300: 2}
    assert ta.links[200]["basis"] == ["shared failures"] and ta.links[200]["overlap"] == 1.0
    events, stories = tl.describe(types, steps)
    fixed = [e for e in events if e.kind == "fixed"]
    assert [(e.step, e.type_id) for e in fixed] == [(300, ta.type_id)]
    assert "11 of its 12 failures at step 200 are right" in fixed[0].text


def test_new_failures_of_the_same_kind_match_by_centroid_and_only_above_the_threshold():
    # step 200's cluster has none of step 100's examples (they were fixed), but points the same way
    c100 = {0: unit([1, 0, 0, 0])}
    near, far = unit([0.97, 0.24, 0, 0]), unit([0.5, 0.86, 0, 0])
    steps = [state(100, {0: ids("a", 20)}, centroids=c100), state(200, {0: ids("n", 15)}, centroids={0: near})]
    types = tl.track(steps)
    assert len(types) == 1 and types[0].links[200]["basis"] == ["centroid"]
    assert types[0].links[200]["similarity"] == pytest.approx(float(near[0]), abs=1e-4)
    steps[1] = state(200, {0: ids("n", 15)}, centroids={0: far})
    assert len(tl.track(steps)) == 2  # cos 0.5 < 0.9: a new type
    assert len(tl.track(steps, min_similarity=0.4)) == 1
    # centroids of different embedders are never compared
    steps[1] = state(200, {0: ids("n", 15)}, centroids={0: near}, embedder="hidden_states-of-another-model")
    assert len(tl.track(steps)) == 2


def test_the_labeled_taxonomy_gives_identity_and_the_name():
    steps = [state(100, {0: ids("a", 20)}, labels={0: "Sarcasm"}), state(200, {5: ids("z", 20)}, labels={5: "Sarcasm"})]
    types = tl.track(steps)
    assert len(types) == 1 and types[0].links[200]["basis"] == ["taxonomy"]
    assert types[0].name == "Sarcasm"
    assert tl.majority_label(ids("a", 4), {"a000": "X", "a001": "X", "a002": "Y"}) == "X"
    assert tl.majority_label(ids("a", 5), {"a000": "X", "a001": "X"}) is None  # 2 of 5 is not half


def test_one_to_one_matching_a_split_keeps_the_larger_part():
    a = ids("a", 40)
    part1, part2 = frozenset(list(sorted(a))[:30]), frozenset(list(sorted(a))[30:])
    types = tl.track([state(100, {0: a}), state(200, {0: part1, 1: part2})])
    assert len(types) == 2
    old = next(t for t in types if 100 in t.clusters)
    assert old.clusters[200] == 0  # Jaccard 30/40 beats 10/40
    new = next(t for t in types if 100 not in t.clusters)
    assert new.first_step == 200


def test_a_type_that_comes_back_keeps_its_id():
    a, b = ids("a", 20), ids("b", 20)
    steps = [state(100, {0: a, 1: b}), state(200, {0: b}), state(300, {0: b, 1: a})]
    types = tl.track(steps)
    assert len(types) == 2
    ta = next(t for t in types if t.clusters.get(100) == 0)
    assert ta.steps == [100, 300] and ta.links[300]["returned"] and ta.links[300]["from_step"] == 100
    events, _ = tl.describe(types, steps)
    assert [(e.step, e.kind) for e in events if e.type_id == ta.type_id] == [(200, "fixed"), (300, "returned")]


def test_ids_do_not_change_when_a_step_is_added():
    steps = [state(100, {0: ids("a", 20), 1: ids("b", 30)}), state(200, {0: ids("b", 30), 1: ids("c", 10)})]
    before = {t.type_id: t.clusters for t in tl.track(steps)}
    after = {t.type_id: t.clusters for t in tl.track(steps + [state(300, {0: ids("c", 10)})])}
    assert all(after[k].items() >= before[k].items() for k in before)
    assert before["T1"] == {100: 1, 200: 0}  # the larger cluster of the first step is T1


def test_a_type_whose_failures_moved_elsewhere_dissolved_rather_than_was_fixed():
    a, b = ids("a", 20), ids("b", 30)
    steps = [state(100, {0: a, 1: b}), state(200, {0: b | a})]  # a merged into b: still failing
    events, _ = tl.describe(tl.track(steps), steps)
    gone = [e for e in events if e.kind in ("fixed", "dissolved")]
    assert [e.kind for e in gone] == ["dissolved"] and "0 of its 20 failures" in gone[0].text


# -- landmarks and words ------------------------------------------------------------------------------------------


def lr_signal(values, every=100):
    return (list(range(every, every * len(values) + 1, every)), list(values))


def test_a_step_decay_is_a_drop_and_a_linear_decay_is_not():
    marks = tl.landmarks({"learning_rate": lr_signal([1e-4] * 5 + [1e-5] * 5)})
    assert [(m.step, m.kind) for m in marks] == [(600, "lr_drop")]
    assert marks[0].phrase == "the learning rate dropped at 600"
    linear = tl.landmarks({"learning_rate": lr_signal(np.linspace(1e-4, 0, 20))})
    assert [m.kind for m in linear] == []
    warm = tl.landmarks({"learning_rate": lr_signal(list(np.linspace(1e-5, 1e-4, 5)) + list(np.linspace(1e-4, 0, 10)))})
    assert [(m.step, m.kind) for m in warm] == [(500, "warmup_end")]


def test_findings_become_landmarks():
    marks = tl.landmarks({}, [
        {"check": "grad_spike", "steps": [730, 910], "message": "grad norm spiked"},
        {"check": "non_finite", "steps": [500], "message": "training loss is NaN at step 500"},
        {"check": "overfitting", "steps": [1200], "message": "..."},
        {"check": "lr_no_warmup", "steps": [1], "message": "..."}])
    assert [(m.step, m.phrase) for m in marks] == [
        (500, "the training loss became NaN at 500"), (730, "a grad-norm spike at 730"),
        (910, "a grad-norm spike at 910"), (1200, "the validation loss started rising at 1,200")]


def test_the_story_of_the_issue_appeared_grew_until_the_lr_dropped():
    """'error type X appeared at step 500 and grew until the learning rate dropped at 1,500'."""
    x = ids("x", 40)
    steps = [state(0, {0: ids("q", 30)})] + [
        state(s, {0: frozenset(list(sorted(x))[:n])}) for s, n in ((500, 10), (1000, 25), (1500, 40), (2000, 8))]
    lr = ([100 * i for i in range(1, 21)], [1e-4 if 100 * i < 1500 else 1e-5 for i in range(1, 21)])
    types = tl.track(steps)
    events, stories = tl.describe(types, steps, signals={"learning_rate": lr})
    t = types[1]
    assert [(e.step, e.kind) for e in events if e.type_id == t.type_id] == [(500, "appeared"), (1500, "grew")]
    assert stories[t.type_id] == ("“cluster 0 at 1500” (T2) appeared at step 500 with 10 failures and grew from 10 "
                                  "to 40 failures until the learning rate dropped at 1,500; at step 2,000 it has 8 "
                                  "failures.")


def test_class_drops_and_flat_output_checks_are_events():
    rows = [{"step": 100, "per_class_f1": {"tech": 0.8, "sport": 0.9}, "checks": {"json_valid": 0.40}},
            {"step": 200, "per_class_f1": {"tech": 0.65, "sport": 0.95}, "checks": {"json_valid": 0.42}}]
    loss = ([50, 100, 150, 200], [2.0, 1.6, 1.2, 0.9])
    events, _ = tl.describe([], [state(100, {}), state(200, {})], rows, signals={"loss": loss})
    assert [(e.step, e.kind) for e in events] == [(200, "class_drop"), (200, "checks_flat")]
    assert events[0].text == "F1 of class “tech” fell from 0.80 to 0.65 at step 200"
    assert events[1].text == ("the training loss fell from 1.6 to 0.9 between steps 100 and 200, but the json_valid "
                              "pass rate did not rise (40% → 42%)")
    rows[1]["checks"]["json_valid"] = 0.7  # it rose: no event
    events, _ = tl.describe([], [state(100, {}), state(200, {})], rows, signals={"loss": loss})
    assert [e.kind for e in events] == ["class_drop"]


def test_a_step_without_clusters_observes_no_type():
    a = ids("a", 20)
    steps = [state(100, {0: a}), state(200, {}, extra_failing=a), state(300, {4: a})]
    types = tl.track(steps)
    assert len(types) == 1 and types[0].clusters == {100: 0, 300: 4}
    assert types[0].links[300]["from_step"] == 100 and not types[0].links[300].get("returned")
    events, _ = tl.describe(types, steps)
    assert events == []  # not "dissolved at 200, came back at 300"
