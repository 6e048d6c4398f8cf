"""Error types that keep their identity across steps: each step's failure clusters matched one to one to the
previous step's (shared failing members, centroid similarity, the same labeled type), else to a type seen earlier,
else new; and the step names runs carry.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from erroranalysis.core.params import Float, Params, param

MIN_OVERLAP = 0.3
MIN_SIMILARITY = 0.9


@dataclass(frozen=True)
class TrackParams(Params):
    """When two steps' clusters are one error type (`track`)."""

    min_overlap: float = param(MIN_OVERLAP, Float(0, 1), "Clusters of consecutive steps match when their shared "
                               "failures reach this Jaccard overlap.")
    min_similarity: float = param(MIN_SIMILARITY, Float(-1, 1), "...or their centroids this cosine similarity.")

LABEL_SHARE = 0.5  # a cluster carries a labeled error type when at least this share of its failures has it
STEP_DIGITS = 6
_STEP = re.compile(r"step-(\d+)")
_CHECKPOINT = re.compile(r"checkpoint-(\d+)")


def step_name(step: int) -> str:
    """The run of training step `step`: `step-000500`; the callback and `watch` both name runs so."""
    return f"step-{int(step):0{STEP_DIGITS}d}"


def step_of(name: str) -> int | None:
    """500 for `step-000500`; None for any other name."""
    match = _STEP.fullmatch(str(name))
    return int(match.group(1)) if match else None


def checkpoint_step(name: str) -> int | None:
    """500 for a Trainer's `checkpoint-500` folder; None for any other name."""
    match = _CHECKPOINT.fullmatch(str(name))
    return int(match.group(1)) if match else None


@dataclass
class StepState:
    """What one analyzed step says about its failures: which examples fail, its clusters (cluster id -> failing
    member ids), their names, centroids (unit vectors, by cluster id) with the embedder that made them, and the
    labeled error type most of a cluster's failures carry."""

    step: int
    name: str = ""
    failing: frozenset = frozenset()
    clusters: dict[int, frozenset] = field(default_factory=dict)
    names: dict[int, str] = field(default_factory=dict)
    centroids: dict[int, np.ndarray] = field(default_factory=dict)
    embedder: str | None = None
    labels: dict[int, str] = field(default_factory=dict)


@dataclass
class ErrorType:
    """One error type followed across steps: its cluster, size, name and label at each step where it is present,
    and how each occurrence was matched to the one before (`links`: from_step, overlap, similarity, basis)."""

    type_id: str
    clusters: dict[int, int] = field(default_factory=dict)
    sizes: dict[int, int] = field(default_factory=dict)
    names: dict[int, str] = field(default_factory=dict)
    labels: dict[int, str] = field(default_factory=dict)
    links: dict[int, dict] = field(default_factory=dict)

    @property
    def steps(self) -> list[int]:
        return sorted(self.clusters)

    @property
    def first_step(self) -> int:
        return self.steps[0]

    @property
    def last_step(self) -> int:
        return self.steps[-1]

    @property
    def peak_step(self) -> int:
        return max(self.steps, key=lambda s: (self.sizes[s], -s))

    @property
    def label(self) -> str | None:
        return self.labels[max(self.labels)] if self.labels else None

    @property
    def name(self) -> str:
        """The labeled error type when there is one, else the cluster's name where the type was largest."""
        return self.label or self.names.get(self.peak_step) or f"cluster {self.clusters[self.peak_step]}"

    def size_at(self, step: int) -> int:
        return self.sizes.get(step, 0)

    def to_dict(self) -> dict:
        return {"type_id": self.type_id, "name": self.name, "label": self.label,
                "first_step": self.first_step, "last_step": self.last_step, "peak_step": self.peak_step,
                "steps": [{"step": s, "cluster_id": self.clusters[s], "size": self.sizes[s],
                           "name": self.names.get(s, ""), "label": self.labels.get(s), "link": self.links.get(s)}
                          for s in self.steps]}


def centroid(vectors: np.ndarray) -> np.ndarray:
    """The unit mean direction of unit-normalised rows (cosine geometry)."""
    v = np.asarray(vectors, dtype=np.float64)
    v = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
    mean = v.mean(axis=0)
    return (mean / max(float(np.linalg.norm(mean)), 1e-12)).astype(np.float32)


def majority_label(members, labels: dict) -> str | None:
    """The error type at least LABEL_SHARE of `members` carry in `labels` (example id -> type name), else None."""
    counts: dict[str, int] = {}
    for e in members:
        name = labels.get(e)
        if name:
            counts[name] = counts.get(name, 0) + 1
    if not counts:
        return None
    name, n = max(counts.items(), key=lambda kv: (kv[1], kv[0]))
    return name if n >= LABEL_SHARE * len(members) else None


def link(a: StepState, a_cid: int, b: StepState, b_cid: int, *, min_overlap: float = MIN_OVERLAP,
         min_similarity: float = MIN_SIMILARITY) -> dict | None:
    """How cluster `a_cid` of step `a` matches cluster `b_cid` of step `b`: overlap (Jaccard of their members failing
    at both steps), centroid similarity (None without comparable centroids), the bases that hold and the score;
    None when no basis holds."""
    shared = a.failing & b.failing
    x, y = a.clusters[a_cid] & shared, b.clusters[b_cid] & shared
    union = len(x | y)
    overlap = len(x & y) / union if union else 0.0
    similarity = None
    if a.embedder and a.embedder == b.embedder and a_cid in a.centroids and b_cid in b.centroids:
        similarity = float(np.dot(a.centroids[a_cid], b.centroids[b_cid]))
    label_a, label_b = a.labels.get(a_cid), b.labels.get(b_cid)
    basis = [name for name, holds in (("shared failures", overlap >= min_overlap),
                                      ("centroid", similarity is not None and similarity >= min_similarity),
                                      ("taxonomy", bool(label_a) and label_a == label_b)) if holds]
    if not basis:
        return None
    score = overlap + (similarity or 0.0) + (1.0 if "taxonomy" in basis else 0.0)
    return {"from_step": a.step, "overlap": round(overlap, 4),
            "similarity": None if similarity is None else round(similarity, 4), "basis": basis, "score": score}


def _assign(items: list[tuple[ErrorType, StepState, int]], state: StepState, cids: list[int], **rules):
    """One-to-one matches (type, cluster id, link) between earlier occurrences and clusters of `state`."""
    from scipy.optimize import linear_sum_assignment

    if not items or not cids:
        return []
    links = [[link(prev, pcid, state, c, **rules) for c in cids] for _, prev, pcid in items]
    score = np.array([[lk["score"] if lk else -1e9 for lk in row] for row in links])
    rows, cols = linear_sum_assignment(-score)
    return [(items[i][0], cids[j], links[i][j]) for i, j in zip(rows, cols) if links[i][j] is not None]


def track(states: list[StepState], *, min_overlap: float = MIN_OVERLAP,
          min_similarity: float = MIN_SIMILARITY) -> list[ErrorType]:
    """Follow error types through `states` (any order; sorted by step). Type ids (`T1`, `T2`, ...) are given in
    order of first appearance, larger clusters first, so adding a later step never renames earlier types."""
    rules = {"min_overlap": min_overlap, "min_similarity": min_similarity}
    states = sorted(states, key=lambda s: s.step)
    types: list[ErrorType] = []
    by_step = {s.step: s for s in states}
    previous: StepState | None = None
    for state in states:
        if not state.clusters:
            continue  # nothing clustered at this step (or too few failures): the types are not observed there
        cids = sorted(state.clusters, key=lambda c: (-len(state.clusters[c]), c))
        found: list[tuple[ErrorType, int, dict | None]] = []
        if previous is not None:
            alive = [(t, previous, t.clusters[previous.step]) for t in types if previous.step in t.clusters]
            found = _assign(alive, state, cids, **rules)
            left = [c for c in cids if c not in {c_ for _, c_, _ in found}]
            gone = [(t, by_step[t.last_step], t.clusters[t.last_step]) for t in types
                    if previous.step not in t.clusters]
            found += [(t, c, {**lk, "returned": True}) for t, c, lk in _assign(gone, state, left, **rules)]
        matched = {c for _, c, _ in found}
        for c in cids:
            if c not in matched:
                t = ErrorType(f"T{len(types) + 1}")
                types.append(t)
                found.append((t, c, None))
        for t, c, lk in found:
            t.clusters[state.step] = c
            t.sizes[state.step] = len(state.clusters[c])
            t.names[state.step] = state.names.get(c, "")
            if state.labels.get(c):
                t.labels[state.step] = state.labels[c]
            if lk is not None:
                t.links[state.step] = {k: v for k, v in lk.items() if k != "score"}
        previous = state
    return types
