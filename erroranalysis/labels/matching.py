"""Match a run's failures to a taxonomy's error types, from the vectors of the examples the taxonomy labeled.

Pure functions over arrays (the stage that reads a run and stores the suggestions is
`erroranalysis.stages.suggestions`; how matching works for users is in docs/compare.md):

- `match_vectors`: `centroid` (default) takes the nearest error-type centroid, `knn` votes among the k nearest
  labeled examples weighted by cosine similarity; a failure farther than the threshold is "unmatched";
- `auto_threshold`: by default the 95th percentile of the labeled examples' own distances to their type's
  centroid without them (to their nearest other labeled example of the type, for knn), so a failure counts as
  matched when it is as close to a type as that type's own examples are;
- `confusion_constraints` / `allowed_types`: a type whose labeled examples all share a gold label or a
  prediction ("tech read as business") only takes failures with that label or prediction;
- `agreement`: suggestions scored against known types, for measuring carry-over.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from erroranalysis.core.errors import DataError
from erroranalysis.core.params import Choice, Flag, Float, Int, Params, Text, param
from erroranalysis.core.validation import check_param

METHODS = ("centroid", "knn")  # the first is the default (see docs/compare.md)
AUTO_QUANTILE = 0.95
DEFAULT_THRESHOLD = 0.5  # when the taxonomy has too few labeled examples to calibrate one
MIN_CALIBRATION = 3
CHUNK = 2048
STATUS_SUGGESTED, STATUS_UNMATCHED, STATUS_KEPT, STATUS_FLAGGED, STATUS_REJECTED = (
    "suggested", "unmatched", "kept", "flagged", "rejected before")


def reference_examples(doc: dict):
    """The taxonomy's labeled examples: accepted assignments with an error type. A DataFrame with example_id,
    error_type, label, pred, text (None when the export left texts out)."""
    import pandas as pd

    known = {" ".join(str(t["name"]).split()) for t in doc.get("error_types", [])}
    rows = []
    for a in doc.get("assignments", []):
        name = a.get("error_type")
        if not name or a.get("status") != "accepted":
            continue
        name = " ".join(str(name).split())
        if name not in known:
            raise DataError(f"taxonomy: assignment of example {a.get('example_id')!r} names error type {name!r}, "
                            "which is not in error_types; export the taxonomy again.")
        rows.append({"example_id": str(a["example_id"]), "error_type": name, "label": str(a.get("label", "")),
                     "pred": str(a.get("pred", "")), "text": a.get("text")})
    return pd.DataFrame(rows, columns=["example_id", "error_type", "label", "pred", "text"])


def check_references(doc: dict, source: str):
    """The taxonomy's labeled examples (reference_examples), refusing a taxonomy with none to match against."""
    refs = reference_examples(doc)
    if refs.empty:
        raise DataError(f"{source}: no labeled examples (assignments with an accepted error type) to match "
                        "against; label failures in the app and export the taxonomy again.")
    return refs


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norms > 0, norms, 1.0)


def auto_threshold(refs: np.ndarray, ref_types: np.ndarray, method: str = "centroid",
                   quantile: float = AUTO_QUANTILE) -> tuple[float, str]:
    """A cosine-distance threshold calibrated on the labeled examples themselves: the `quantile` of each labeled
    example's distance to its nearest other labeled example of the same type (knn) or to its type's centroid
    without it (centroid). Returns (threshold, how it was found)."""
    check_param("method", method, method in METHODS, "one of " + ", ".join(METHODS))
    r = _unit(refs)
    t = np.asarray(ref_types, dtype=np.int64)
    distances = []
    if method == "knn":
        for start in range(0, len(r), CHUNK):
            sims = r[start:start + CHUNK] @ r.T
            same = t[start:start + CHUNK, None] == t[None, :]
            rows = np.arange(sims.shape[0])
            same[rows, start + rows] = False
            sims = np.where(same, sims, -np.inf)
            best = sims.max(axis=1)
            distances.append(1.0 - best[np.isfinite(best)])
    else:
        for ty in np.unique(t):
            members = r[t == ty]
            if len(members) < 2:
                continue
            total = members.sum(axis=0)
            loo = _unit(total[None, :] - members)
            distances.append(1.0 - np.einsum("ij,ij->i", members, loo))
    d = np.concatenate(distances) if distances else np.zeros(0)
    if len(d) < MIN_CALIBRATION:
        return DEFAULT_THRESHOLD, (f"default {DEFAULT_THRESHOLD} (fewer than {MIN_CALIBRATION} labeled examples "
                                   "share a type with another, too few to calibrate)")
    value = float(np.quantile(d, quantile))
    what = "nearest labeled example of the same type" if method == "knn" else "own type's centroid"
    return value, (f"auto: {quantile:.0%} of the {len(d)} labeled examples lie within {value:.3f} of their {what}")


@dataclass
class Matches:
    """Per failure: the chosen type (-1 = unmatched), the closest type even when too far, the cosine distance to it
    (nearest labeled example of it for knn, its centroid for centroid), the vote share of the chosen type among
    the neighbours (1.0 for centroid), the index of the nearest labeled example of the closest type, and whether
    no type was allowed for the failure at all (`excluded`: then closest/distance/nearest are the unconstrained
    ones, for display)."""

    type_index: np.ndarray
    closest: np.ndarray
    distance: np.ndarray
    vote: np.ndarray
    nearest: np.ndarray
    excluded: np.ndarray
    threshold: float
    threshold_basis: str


def match_vectors(failures: np.ndarray, refs: np.ndarray, ref_types: Sequence[int], *, method: str = "centroid",
                  k: int = 5, threshold: float | None = None, allowed: np.ndarray | None = None) -> Matches:
    """Match failure vectors [n, d] to error types given labeled vectors [m, d] with type indices [m] (cosine).

    `allowed` (bool [n, n_types], optional) says which types each failure may take (see `confusion_constraints`).
    """
    check_param("method", method, method in METHODS, "one of " + ", ".join(METHODS))
    check_param("k", k, isinstance(k, (int, np.integer)) and not isinstance(k, bool) and 1 <= k <= 100,
                "an integer in [1, 100]")
    check_param("threshold", threshold, threshold is None or (isinstance(threshold, (int, float))
                and not isinstance(threshold, bool) and 0 < threshold <= 2), "a cosine distance in (0, 2], or None")
    f, r = _unit(failures), _unit(refs)
    t = np.asarray(ref_types, dtype=np.int64)
    if len(r) == 0:
        raise DataError("no labeled examples to match against; label some failures and export the taxonomy again.")
    if f.shape[1:] != r.shape[1:] and len(f):
        raise DataError(f"failure vectors have {f.shape[1]} dimensions but labeled ones {r.shape[1]}; embed both "
                        "with the same embedder.")
    n, n_types = len(f), int(t.max()) + 1
    if allowed is not None:
        allowed = np.asarray(allowed, dtype=bool)
        if allowed.shape != (n, n_types):
            raise DataError(f"allowed has shape {allowed.shape}; expected ({n}, {n_types}): failures x types.")
    if threshold is None:
        threshold, basis = auto_threshold(r, t, method)
    else:
        basis = f"given: {float(threshold):g}"
    closest = np.full(n, -1, dtype=np.int64)
    distance = np.full(n, np.nan, dtype=np.float32)
    vote = np.zeros(n, dtype=np.float32)
    nearest = np.full(n, -1, dtype=np.int64)
    excluded = np.zeros(n, dtype=bool)
    centroids = None
    if method == "centroid":
        sums = np.zeros((n_types, r.shape[1]), dtype=np.float32)
        np.add.at(sums, t, r)
        present = np.bincount(t, minlength=n_types) > 0
        centroids = _unit(sums)
    kk = min(int(k), len(r))
    for start in range(0, n, CHUNK):
        sl = slice(start, min(start + CHUNK, n))
        raw = f[sl] @ r.T  # [c, m]
        rows = np.arange(raw.shape[0])
        ok = allowed[sl] if allowed is not None else np.ones((len(rows), n_types), dtype=bool)
        sims = np.where(ok[:, t], raw, -np.inf)
        if method == "centroid":
            csims = f[sl] @ centroids.T
            csims[:, ~present] = -np.inf
            csims = np.where(ok, csims, -np.inf)
            chosen = csims.argmax(axis=1)
            dist = 1.0 - csims[rows, chosen]
            share = np.ones(len(rows), dtype=np.float32)
        else:
            top = np.argpartition(-sims, kk - 1, axis=1)[:, :kk] if kk < len(r) else np.tile(np.arange(len(r)),
                                                                                             (len(rows), 1))
            top_sims = sims[rows[:, None], top]
            weights = np.where(np.isfinite(top_sims), np.clip(top_sims, 0.0, None) + 1e-6, 0.0)
            votes = np.zeros((len(rows), n_types), dtype=np.float64)
            np.add.at(votes, (np.repeat(rows, top.shape[1]), t[top].ravel()), weights.ravel())
            # the nearest neighbour breaks ties between types with equal votes
            nearest_type = t[top[rows, top_sims.argmax(axis=1)]]
            votes[rows, nearest_type] += 1e-9
            chosen = votes.argmax(axis=1)
            share = (votes[rows, chosen] / np.maximum(votes.sum(axis=1), 1e-12)).astype(np.float32)
            of_chosen = np.where(t[top] == chosen[:, None], top_sims, -np.inf)
            dist = 1.0 - of_chosen.max(axis=1)
        # nearest labeled example of the chosen type, for showing beside the suggestion
        typed = np.where(t[None, :] == chosen[:, None], sims, -np.inf)
        near = typed.argmax(axis=1)
        none = ~ok.any(axis=1)
        if none.any():  # no type allowed: show the unconstrained nearest, never match
            best = raw[none].argmax(axis=1)
            chosen, near, dist = chosen.copy(), near.copy(), dist.copy()
            chosen[none], near[none] = t[best], best
            dist[none] = 1.0 - raw[none, best]
            share = share.copy()
            share[none] = 0.0
        closest[sl], distance[sl], vote[sl], nearest[sl], excluded[sl] = chosen, dist, share, near, none
    distance = np.clip(distance, 0.0, 2.0).astype(np.float32)
    matched = (distance <= threshold + 1e-6) & ~excluded
    return Matches(type_index=np.where(matched, closest, -1), closest=closest, distance=distance, vote=vote,
                   nearest=nearest, excluded=excluded, threshold=float(threshold), threshold_basis=basis)


MIN_CONSTRAINT = 3  # labeled examples that must agree before a type is held to one gold label or prediction


def confusion_constraints(refs, min_examples: int = MIN_CONSTRAINT) -> dict[str, dict[str, str]]:
    """For each error type whose labeled examples (at least `min_examples`) all have the same gold label and/or the
    same prediction: that label / prediction. Such a type describes one confusion ("tech read as business"), so it
    only takes failures that make it; a type whose examples span labels and predictions ("sarcasm") has none."""
    out: dict[str, dict[str, str]] = {}
    for name, group in refs.groupby("error_type"):
        if len(group) < min_examples:
            continue
        rule = {}
        for col in ("label", "pred"):
            values = set(group[col])
            if len(values) == 1 and "" not in values:
                rule[col] = next(iter(values))
        if rule:
            out[str(name)] = rule
    return out


def allowed_types(failures, type_names: Sequence[str], constraints: dict[str, dict[str, str]]) -> np.ndarray:
    """bool [n_failures, n_types]: which types each failure (rows with label and pred) may take."""
    ok = np.ones((len(failures), len(type_names)), dtype=bool)
    for j, name in enumerate(type_names):
        for col, value in constraints.get(name, {}).items():
            ok[:, j] &= failures[col].astype(str).to_numpy() == value
    return ok


@dataclass(frozen=True)
class MatchParams(Params):
    """How a labeled taxonomy's error types are matched to another run's failures (`apply-taxonomy`)."""

    method: str = param(METHODS[0], Choice(*METHODS), "centroid: nearest error-type centroid; knn: vote of the k "
                        "nearest labeled examples.")
    k: int = param(5, Int(1, 100), "Neighbours that vote (knn).")
    threshold: float | None = param(None, Float(0, 2, low_open=True), "Largest cosine distance to a type for a "
                                    "match; farther failures are new/unmatched.",
                                    none="calibrated on the taxonomy's labeled examples", short="-t")
    confusions: bool = param(True, Flag(), "A type whose labeled examples all share a gold label or prediction only "
                             "takes failures with that label or prediction (--ignore-confusions: any failure may "
                             "take any type).", flag="--confusions/--ignore-confusions")
    embedder: str | None = param(None, Text(), "minilm, hidden or FILE.npy: the vectors failures are matched in.",
                                 none="the embedder the run was clustered with (minilm when it is not clustered)",
                                 short="-e")


def agreement(suggestions, truth: dict[str, str | None]) -> dict:
    """How suggestions compare with known error types (`truth`: example id -> type name, None = a new type that
    the taxonomy does not have). Over the failures in `truth`:

    - `agreement`: share whose outcome is right (the true type suggested, or unmatched when the type is new);
    - `accuracy_known`: among failures of known types, share given the true type;
    - `coverage_known`: among those, share given any type; `precision`: share of suggestions that are right;
    - `unmatched_recall`: among failures of new types, share left unmatched.
    """
    status = dict(zip(suggestions["example_id"], suggestions["status"]))
    given = dict(zip(suggestions["example_id"], suggestions["error_type"]))
    n = right = known = known_right = covered = suggested = suggested_right = new = new_unmatched = 0
    for ex, true in truth.items():
        if ex not in status:
            continue
        n += 1
        got = given.get(ex) if status[ex] == STATUS_SUGGESTED else None
        if got is not None:
            suggested += 1
            suggested_right += int(got == true)
        if true is None:
            new += 1
            new_unmatched += int(got is None)
            right += int(got is None)
        else:
            known += 1
            covered += int(got is not None)
            known_right += int(got == true)
            right += int(got == true)
    ratio = (lambda a, b: round(a / b, 4) if b else math.nan)
    return {"n": n, "agreement": ratio(right, n), "n_known": known, "accuracy_known": ratio(known_right, known),
            "coverage_known": ratio(covered, known), "n_suggested": suggested,
            "precision": ratio(suggested_right, suggested), "n_new": new,
            "unmatched_recall": ratio(new_unmatched, new)}


def family_matches(failures: np.ndarray, refs: np.ndarray, ref_type_names: Sequence[str],
                   parent_of: dict[str, str | None], unmatched: np.ndarray, *, method: str = "centroid", k: int = 5,
                   threshold: float | None = None) -> np.ndarray:
    """The second level of a two-level taxonomy: a failure no error type took (`unmatched`) is matched against the
    families, each a parent type with the labeled examples of its own and of its sub-types, with a threshold
    calibrated the same way on the families. Returns the parent type's name per failure, or None."""
    children = {name: parent for name, parent in parent_of.items() if parent}
    parents = set(children.values())
    family = np.array([children.get(t, t if t in parents else None) for t in ref_type_names], dtype=object)
    use = np.array([f is not None for f in family], dtype=bool)
    out = np.full(len(failures), None, dtype=object)
    unmatched = np.asarray(unmatched, dtype=bool)
    if not use.any() or not unmatched.any():
        return out
    names = sorted(set(family[use]), key=str.casefold)
    index = {name: i for i, name in enumerate(names)}
    found = match_vectors(failures[unmatched], refs[use], [index[f] for f in family[use]], method=method, k=k,
                          threshold=threshold)
    took = found.type_index >= 0
    out[np.flatnonzero(unmatched)[took]] = [names[j] for j in found.type_index[took]]
    return out
