"""Failure modes of generation runs: failing outputs grouped by how they fail first, by what they say second.

A failure's `failure_reason` (its failing checks' and signals' reasons, `; `-joined) becomes categories: each
reason without its details in parentheses, with the facts the `json` check and the `shape` signal both tell
written once (`shape: ...`), and every empty output one category. Its **mode** is the first explaining signal it has,
in the order of `EXPLAINS` (a refusal explains the missing JSON and the wrong answer, a loop the cut-off, ...),
else all its categories together, without those another implies (`json_schema: no JSON to validate` beside a
shape failure). Failures of one mode make one error type whatever their prompts' topic; two modes on one topic are
two.

Reasons that only say the output differs from the reference (`GENERIC`: `normalized: differs from the reference`,
a judge's low score, ...) do not tell modes apart; the outputs' embedding does: a generic failure whose output is
close to the centre of a specific mode's outputs (cosine >= `attach`) joins it, and the rest of a large generic
mode are clustered by their outputs (`FailureClustering`) when that split is not merely the prompts' topics (the
adjusted Rand index between it and the prompts' own clustering below `max_topic_ari`): the prompt is a weak
signal, used only to veto a split by topic.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

EMPTY = "empty output"
EXPLAINS = ("refusal: declines to answer", "repetition: a loop", EMPTY, "language: wrong language",
            "length: cut off at max_tokens")
GENERIC = frozenset({
    "normalized: differs from the reference", "exact: differs from the reference",
    "contains: reference not in the output", "token_f1: low overlap", "rouge_l: low overlap",
    "judge: below the pass threshold", "numeric: wrong number", "numeric: no number in the output",
    "json_fields: no JSON to compare", "json_schema: no JSON to validate", "shape: no JSON in the output",
    "shape: not valid JSON", "regex: no match", "tool_call: no tool call found"})
IMPLIED = {"json_fields: no JSON to compare": "shape:", "json_schema: no JSON to validate": "shape:",
           "tool_call: no tool call found": "shape:"}
MODE = "mode"  # the tier of a failure-mode cluster


def category(reason: str) -> str:
    """A reason without its details: `json: text before the JSON` -> `shape: text before the JSON`."""
    text = re.sub(r"\s*\(.*$", "", str(reason)).strip()
    if text.endswith(EMPTY):
        return EMPTY
    if text.startswith("json: "):
        text = "shape: " + text[len("json: "):]
    return text.replace("shape: cut off at max_new_tokens", "shape: JSON cut short")


def categories(failure_reason: str) -> frozenset:
    found = {category(r) for r in str(failure_reason).split("; ") if r.strip()}
    return frozenset(c for c in found if not (c in IMPLIED and any(o.startswith(IMPLIED[c]) for o in found - {c})))


def mode_of(cats: frozenset) -> str:
    """The first explaining signal of `EXPLAINS` among the categories, else all of them (sorted, ` + `-joined)."""
    for signal in EXPLAINS:
        if signal in cats:
            return signal
    return " + ".join(sorted(cats)) if cats else "no reason given"


def is_generic(mode: str) -> bool:
    return all(part in GENERIC for part in mode.split(" + "))


def _unit(v: np.ndarray) -> np.ndarray:
    v = np.asarray(v, dtype=np.float32)
    return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)


def group_by_mode(reasons, vectors: np.ndarray | None = None, prompt_vectors: np.ndarray | None = None, *,
                  min_cluster_size: int = 5, attach: float = 0.5, max_topic_ari: float = 0.5, split=None):
    """(cluster per failure, -1 none; membership in [0, 1]; mode per failure; {cluster: mode}).

    `vectors`: the failures' output embedding (optional: without it modes alone decide); `prompt_vectors` their
    prompts' (optional: without them a generic mode is never split); `split(vectors) -> labels`: how a generic mode's
    outputs are clustered (None: not split).
    """
    modes = np.array([mode_of(categories(r)) for r in reasons], dtype=object)
    n = len(modes)
    labels = np.full(n, -1, dtype=np.int64)
    strength = np.zeros(n, dtype=np.float32)
    names, counts = np.unique(modes, return_counts=True) if n else (np.array([]), np.array([]))
    specific = [m for m, c in sorted(zip(names, counts), key=lambda t: (-t[1], t[0])) if not is_generic(m)]
    cluster_mode: dict[int, str] = {}
    for m in specific:
        rows = modes == m
        if rows.sum() >= 2:
            c = len(cluster_mode)
            labels[rows], strength[rows], cluster_mode[c] = c, 1.0, m
    generic = np.flatnonzero(np.array([is_generic(m) for m in modes], dtype=bool))
    if vectors is not None and len(generic) and cluster_mode:
        unit = _unit(vectors)
        centres = _unit(np.stack([unit[labels == c].mean(axis=0) for c in cluster_mode]))
        sims = unit[generic] @ centres.T
        best, top = sims.argmax(axis=1), sims.max(axis=1)
        near = top >= attach
        labels[generic[near]], strength[generic[near]] = best[near], top[near]
        generic = generic[~near]
    for m in sorted({modes[i] for i in generic}):
        rows = generic[modes[generic] == m]
        parts = _split(rows, vectors, prompt_vectors, min_cluster_size, max_topic_ari, split)
        for part in parts:
            if len(part) >= 2:
                c = len(cluster_mode)
                labels[part], strength[part], cluster_mode[c] = c, 1.0, m
    return labels, strength, modes, cluster_mode


def _split(rows: np.ndarray, vectors, prompt_vectors, mcs: int, max_topic_ari: float, split) -> list[np.ndarray]:
    """A generic mode's failures as one group, or as the clusters of their outputs when those are not the topics."""
    if split is None or vectors is None or prompt_vectors is None or len(rows) < 2 * mcs:
        return [rows]
    from sklearn.metrics import adjusted_rand_score

    by_output = np.asarray(split(np.asarray(vectors)[rows]))
    if len(set(by_output[by_output >= 0].tolist())) < 2:
        return [rows]
    by_prompt = np.asarray(split(np.asarray(prompt_vectors)[rows]))
    if adjusted_rand_score(by_prompt, by_output) >= max_topic_ari:
        return [rows]  # the outputs split as the prompts do: topics, not modes
    return [rows[by_output == c] for c in np.unique(by_output[by_output >= 0])] + [rows[by_output < 0]]


def cluster_by_mode(reasons, vectors: np.ndarray | None, prompt_vectors: np.ndarray | None = None, params=None):
    """`group_by_mode` as a `ClusteringResult` (ids by size, tier "mode"), a generic mode's outputs split by
    `FailureClustering` with `params` (its min cluster size, seed, reducer)."""
    from erroranalysis.cluster._fit import ClusteringResult, FailureClustering, default_min_cluster_size
    from erroranalysis.cluster._groups import relabel_by_size
    from erroranalysis.cluster._params import ClusteringParams

    params = params if params is not None else ClusteringParams()
    n = len(reasons)
    mcs = params.min_cluster_size or default_min_cluster_size(n)
    inner = params.replace(error_aware=False, parent_similarity=None, min_cluster_size=mcs)

    def split(v):
        if len(v) < max(params.min_failures, 2 * mcs):
            return np.full(len(v), -1)
        return FailureClustering(inner).fit(v).result_.labels

    labels, strength, modes, cluster_mode = group_by_mode(
        reasons, vectors, prompt_vectors, min_cluster_size=mcs, attach=params.mode_attach,
        max_topic_ari=params.mode_topic_ari, split=split)
    labels, mapping = relabel_by_size(labels)
    strength = np.where(labels >= 0, strength, 0).astype(np.float32)
    n_modes = len(set(modes.tolist()))
    note = f"{n_modes} failure modes from the checks' and signals' reasons; {len(mapping)} error types"
    return ClusteringResult(
        labels=labels, membership=strength, reassigned=np.zeros(n, bool), tier=np.full(n, MODE, dtype=object),
        local_error_rate=np.full(n, np.nan, np.float32), coordinates=None, method="failure_modes", note=note,
        params={"min_cluster_size": mcs, "n_failures": n, "n_modes": n_modes}, cluster_tier={c: MODE for c in
                                                                                             mapping.values()})


# -- a fit on a sample, the rest placed (`--engine ray`: `blockwise.place_block` on the workers) ------------------


@dataclass
class ModeRule:
    """What a fit of the sample by failure mode (`cluster_by_mode` over a sample stratified by mode) tells a worker
    placing a failure left out of it: the sample failures' modes, the cluster of each specific mode, the centres
    of the specific modes' outputs in `group_by_mode`'s order (to attach a generic failure), `attach`."""

    modes: np.ndarray
    cluster_of: dict
    centres: np.ndarray
    centre_cluster: np.ndarray
    attach: float


def mode_rule(reasons, labels: np.ndarray, vectors: np.ndarray, attach: float = 0.5) -> ModeRule:
    """The `ModeRule` of a fitted sample (its reasons, its `cluster_by_mode` labels, its output vectors)."""
    modes = np.array([mode_of(categories(r)) for r in reasons], dtype=object)
    names, counts = np.unique(modes, return_counts=True) if len(modes) else (np.array([]), np.array([]))
    specific = [m for m, c in sorted(zip(names, counts), key=lambda t: (-t[1], t[0])) if not is_generic(m) and c >= 2]
    cluster_of = {m: int(labels[modes == m][0]) for m in specific}
    unit = _unit(vectors) if len(vectors) else np.zeros((0, 0), np.float32)
    centres = _unit(np.stack([unit[modes == m].mean(axis=0) for m in specific])) if specific else \
        np.zeros((0, unit.shape[1] if unit.ndim == 2 else 0), np.float32)
    return ModeRule(modes, cluster_of, centres, np.array([cluster_of[m] for m in specific], np.int64), attach)


def place_by_mode(reasons, X: np.ndarray, X_fit: np.ndarray, fitted, rule: ModeRule, d90: float):
    """(failures outside the fit sample placed by `group_by_mode`'s rule: a specific mode's failure joins its mode's
    cluster; a generic one a specific mode's whose centre is within `attach` (membership: that cosine), else the
    cluster its nearest fitted failures of its own generic mode are in (one cluster: membership 1; a mode the fit
    split by outputs: `_assigned.place`'s vote); their 10 nearest fitted failures and distances, for the layout)."""
    from erroranalysis.cluster._assigned import Assigned, place
    from erroranalysis.cluster._neighbors import knn_cosine

    placed = Assigned.empty(len(X))
    placed.tier = np.full(len(X), MODE, dtype=object)
    if not len(X):
        return placed, np.zeros((0, 10), np.int64), np.zeros((0, 10), np.float32)
    near, dist = knn_cosine(X, X_fit, 10, return_distance=True)
    modes = np.array([mode_of(categories(r)) for r in reasons], dtype=object)
    generic = np.array([is_generic(m) for m in modes], dtype=bool)
    for i in np.flatnonzero(~generic):
        c = rule.cluster_of.get(modes[i], -1)
        placed.labels[i], placed.strength[i] = c, 1.0 if c >= 0 else 0.0
    rest = np.flatnonzero(generic)
    if len(rest) and len(rule.centres):
        sims = _unit(X[rest]) @ rule.centres.T
        best, top = sims.argmax(axis=1), sims.max(axis=1)
        near_mode = top >= rule.attach
        placed.labels[rest[near_mode]] = rule.centre_cluster[best[near_mode]]
        placed.strength[rest[near_mode]] = top[near_mode]
        rest = rest[~near_mode]
    own = np.isin(fitted.labels, list(rule.cluster_of.values()), invert=True) & (fitted.labels >= 0)
    for m in sorted(set(modes[rest].tolist())):
        rows = rest[modes[rest] == m]
        candidates = np.flatnonzero(own & (rule.modes == m))
        found = set(fitted.labels[candidates].tolist())
        if len(found) == 1:
            placed.labels[rows], placed.strength[rows] = found.pop(), 1.0
        elif found:
            sub = Assigned(fitted.labels[candidates], fitted.strength[candidates], fitted.tier[candidates],
                           fitted.reassigned[candidates])
            voted, _, _ = place(X[rows], X_fit[candidates], sub, d90)
            placed.labels[rows], placed.strength[rows] = voted.labels, voted.strength
    return placed, near, dist
