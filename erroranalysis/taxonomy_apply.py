"""Carry a labeled taxonomy over to another run or workspace: import its error types, and suggest error types for a
new run's failures from the labeled examples it carries.

    from erroranalysis import taxonomy_apply as ta

    doc = ta.load_taxonomy("taxonomy.json")            # validated: schema version, schema, no unknown fields
    ta.import_taxonomy(doc, LabelStore("other/labels.sqlite"))    # error types only, idempotent
    result = ta.apply_taxonomy(doc, "runs/candidate")   # suggestions (source 'suggested', status 'pending')
    ta.review(store, result.run_key, ["194", "201"], accept=True)

How a failure is matched (see docs/compare.md):

1. the same example (same id and text) labeled in the taxonomy keeps its error type ("same example"), unless that
   type describes another confusion (below);
2. otherwise its vector is compared with the vectors of the taxonomy's labeled examples, embedded with the run's
   own embedder (the one its clustering used, from embeddings.json): `centroid` (default) takes the nearest
   error-type centroid, `knn` votes among the k nearest labeled examples weighted by cosine similarity;
   a type whose labeled examples all share a gold label or a prediction ("tech read as business") only takes
   failures with that label or prediction (`confusion_constraints`);
3. a failure farther than `threshold` (cosine distance to the chosen type's centroid, or to its nearest labeled
   example for knn) is "unmatched": a new kind of failure, left for a person to name. By default the threshold is
   the 95th percentile of the labeled examples' own distances to their type's centroid without them (to their
   nearest other labeled example of the type, for knn), so a failure counts as matched when it is as close to a
   type as that type's own examples are.

Nothing is computed into the store before everything is checked and matched; the suggestions land in the labels
store as `source='suggested'`, `status='pending'` (they count once accepted) and, with their distances and nearest
labeled example, in the run's `taxonomy_suggestions.parquet`. Human labels are never overwritten.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from erroranalysis import runs
from erroranalysis.errors import DataError, RunError, UserError, check_param, preview

SUGGESTIONS = "taxonomy_suggestions.parquet"
STAGE = "apply_taxonomy"
METHODS = ("centroid", "knn")  # the first is the default (see docs/compare.md)
ON_CLASH = ("reuse", "update", "fail")
AUTO_QUANTILE = 0.95
DEFAULT_THRESHOLD = 0.5  # when the taxonomy has too few labeled examples to calibrate one
MIN_CALIBRATION = 3
CHUNK = 2048

SUGGESTION_COLUMNS = ["example_id", "label", "pred", "status", "error_type", "closest_type", "basis", "distance",
                      "vote", "nearest_id", "cluster_id"]
STATUS_SUGGESTED, STATUS_UNMATCHED, STATUS_KEPT, STATUS_FLAGGED, STATUS_REJECTED = (
    "suggested", "unmatched", "kept", "flagged", "rejected before")

Progress = Callable[[int, int], None]


# -- reading and validating a taxonomy file ---------------------------------------------------------------------


def load_taxonomy(source: str | Path | dict, name: str | None = None) -> dict:
    """A taxonomy export (path or already-parsed dict) checked for format, schema version, schema and unknown
    fields. Raises DataError naming the file and the first offending place."""
    from erroranalysis import taxonomy

    if isinstance(source, dict):
        doc, where = source, name or "taxonomy"
        if doc.get("format") != taxonomy.FORMAT:
            raise DataError(f"{where}: not an erroranalysis taxonomy (no \"format\": \"{taxonomy.FORMAT}\").")
        if doc.get("schema_version") != taxonomy.SCHEMA_VERSION:
            raise DataError(f"{where}: schema_version {doc.get('schema_version')!r} is not supported "
                            f"(expected {taxonomy.SCHEMA_VERSION}); export it again with this version.")
        taxonomy.validate(doc, where)
    else:
        where = name or str(source)
        if Path(source).is_dir():
            raise DataError(f"{source}: is a directory; pass the taxonomy JSON file "
                            "('erroranalysis export RUN --format json' writes one).")
        doc = taxonomy.load(source)
    unknown = unknown_fields(doc, taxonomy.JSON_SCHEMA)
    if unknown:
        raise DataError(f"{where}: unknown field {unknown[0]!r} (not in taxonomy schema_version "
                        f"{taxonomy.SCHEMA_VERSION}); export it again with this version of erroranalysis, or remove "
                        "the field.")
    return doc


def unknown_fields(doc: Any, schema: dict, path: str = "") -> list[str]:
    """Paths (`run/embedder`, `error_types/0/color`) of keys that `schema` does not name, depth first."""
    found: list[str] = []
    props: dict = {}
    parts = schema.get("allOf", []) + [schema]
    for part in parts:
        props.update(part.get("properties", {}))
    free = any(isinstance(p.get("additionalProperties"), dict) for p in parts)
    if isinstance(doc, dict):
        for key, value in doc.items():
            sub = f"{path}/{key}" if path else str(key)
            if key in props:
                found += unknown_fields(value, props[key], sub)
            elif props and not free:
                found.append(sub)
    elif isinstance(doc, list):
        items = next((p["items"] for p in parts if isinstance(p.get("items"), dict)), None)
        if items is not None:
            for i, value in enumerate(doc):
                found += unknown_fields(value, items, f"{path}/{i}")
    return found


# -- importing error types ------------------------------------------------------------------------------------


@dataclass
class ImportResult:
    created: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    clashes: list[dict] = field(default_factory=list)  # {name, existing, field, ours, theirs}
    type_ids: dict[str, int] = field(default_factory=dict)  # taxonomy name -> id in the store

    def summary(self) -> str:
        parts = [f"{len(self.created)} created", f"{len(self.reused)} already there"]
        if self.updated:
            parts.append(f"{len(self.updated)} updated")
        return ", ".join(parts)


def _clash_fields(existing, wanted: dict) -> list[tuple[str, str, str]]:
    out = []
    for key in ("definition", "severity"):
        ours, theirs = getattr(existing, key), wanted[key]
        if (ours or "") != (theirs or ""):
            out.append((key, ours, theirs))
    if existing.name != wanted["name"]:
        out.append(("name", existing.name, wanted["name"]))
    return out


def plan_import(doc: dict, store, *, on_clash: str = "reuse") -> list[dict]:
    """What importing would do, per error type: {name, action (create/reuse/update), existing, differences}.
    Raises UserError with on_clash='fail' when a name exists with another definition or severity."""
    check_param("on_clash", on_clash, on_clash in ON_CLASH, "one of " + ", ".join(ON_CLASH))
    existing = {t.name.casefold(): t for t in store.error_types()}
    plan, seen = [], set()
    for et in doc.get("error_types", []):
        name = " ".join(str(et["name"]).split())
        key = name.casefold()
        if key in seen:
            raise DataError(f"taxonomy: error type {name!r} appears twice (names are case-insensitive); "
                            "merge them in the source workspace and export again.")
        seen.add(key)
        wanted = {"name": name, "definition": et.get("definition") or "", "severity": et.get("severity") or "medium"}
        have = existing.get(key)
        if have is None:
            plan.append({"name": name, "action": "create", "existing": None, "differences": [], "wanted": wanted})
            continue
        diffs = _clash_fields(have, wanted)
        meaningful = [d for d in diffs if d[0] != "name"]
        if meaningful and on_clash == "fail":
            f, ours, theirs = meaningful[0]
            raise UserError(f"error type {name!r} exists in {store.path} with another {f} ({_short(ours)!r} here, "
                            f"{_short(theirs)!r} in the taxonomy); pass --on-clash reuse to keep this workspace's, "
                            "or --on-clash update to take the taxonomy's.")
        action = "update" if meaningful and on_clash == "update" else "reuse"
        plan.append({"name": name, "action": action, "existing": have, "differences": diffs, "wanted": wanted})
    return plan


def import_taxonomy(taxonomy: str | Path | dict, store, *, on_clash: str = "reuse") -> ImportResult:
    """Create the taxonomy's error types in `store` (a LabelStore). Idempotent: a type whose name exists already
    (case-insensitive) is reused (on_clash='reuse', keeping this workspace's definition and severity), updated to
    the taxonomy's ('update'), or refused before anything is written ('fail')."""
    doc = load_taxonomy(taxonomy) if not isinstance(taxonomy, dict) else taxonomy
    plan = plan_import(doc, store, on_clash=on_clash)
    result = ImportResult()
    for item in plan:
        wanted = item["wanted"]
        for f, ours, theirs in item["differences"]:
            result.clashes.append({"name": wanted["name"], "existing": item["existing"].name, "field": f,
                                   "ours": ours, "theirs": theirs})
        if item["action"] == "create":
            try:
                created = store.create_error_type(wanted["name"], wanted["definition"], wanted["severity"])
            except UserError:  # created by someone else in the meantime: reuse it
                created = store.error_type(wanted["name"])
                result.reused.append(created.name)
            else:
                result.created.append(created.name)
            result.type_ids[wanted["name"]] = created.id
        elif item["action"] == "update":
            updated = store.update_error_type(item["existing"].id, definition=wanted["definition"],
                                              severity=wanted["severity"])
            result.updated.append(updated.name)
            result.type_ids[wanted["name"]] = updated.id
        else:
            result.reused.append(item["existing"].name)
            result.type_ids[wanted["name"]] = item["existing"].id
    return result


def _short(text: Any, limit: int = 40) -> str:
    s = " ".join(str(text or "").split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


# -- the labeled examples a taxonomy carries -------------------------------------------------------------------------


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


def _check_references(doc: dict, source: str):
    refs = reference_examples(doc)
    if refs.empty:
        raise DataError(f"{source}: no labeled examples (assignments with an accepted error type) to match "
                        "against; label failures in the app and export the taxonomy again.")
    return refs


# -- matching in embedding space (pure functions over arrays) --------------------------------------------------------


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


# -- embedders: the run's own ---------------------------------------------------------------------------------------


def read_embeddings_meta(run: runs.Run) -> dict | None:
    """embeddings.json of a clustered run (embedder description and example ids), or None."""
    if not run.has(runs.EMBEDDINGS_META):
        return None
    file = run.file(runs.EMBEDDINGS_META)
    try:
        meta = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RunError(f"{file}: unreadable ({exc}); re-run 'erroranalysis cluster {run.path}'.") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("embedder"), dict):
        raise RunError(f"{file}: no 'embedder' entry; re-run 'erroranalysis cluster {run.path}'.")
    return meta


def run_embedder(run: runs.Run, predictions, spec=None):
    """(embedder, note): `spec` when given (minilm, hidden, FILE.npy or an object), else the embedder the run's
    clustering used (re-created from embeddings.json), else minilm. The note says what was chosen and why."""
    from erroranalysis import embedding

    meta = read_embeddings_meta(run)
    recorded = (meta or {}).get("embedder") or {}
    if spec is not None:
        emb = embedding.resolve_embedder(spec, run, predictions)
        key = getattr(emb, "key", None)
        if recorded and recorded.get("key") != key:
            return emb, (f"matching with {embedding.describe(emb)['name']} as asked; the run's clustering used "
                         f"{recorded.get('name')!r}, so its stored vectors are not used")
        return emb, f"matching with {embedding.describe(emb)['name']}"
    if not recorded:
        return embedding.resolve_embedder("minilm", run, predictions), \
            "the run is not clustered; matching with minilm (the default embedder)"
    name = recorded.get("name")
    if name == "minilm":
        emb = embedding.MiniLMEmbedder(max_length=int(recorded.get("max_length") or 256))
        embedding.minilm_path()
    elif name == "hidden":
        emb = embedding.HiddenStatesEmbedder(run, len(predictions))
    elif name == "file":
        emb = embedding.PrecomputedEmbedder(recorded.get("source", ""), predictions["example_id"].astype(str).tolist())
    else:
        raise RunError(f"{run.file(runs.EMBEDDINGS_META)}: the run was clustered with a custom embedder "
                       f"{recorded.get('key', name)!r} that cannot be re-created here; pass --embedder minilm, hidden "
                       "or FILE.npy.")
    note = f"matching with the run's own embedder ({name})"
    if recorded.get("key") != getattr(emb, "key", None):
        note += (f"; its key changed since clustering ({recorded.get('key')!r} -> {emb.key!r}), so the failures are "
                 "embedded again")
    return emb, note


def _failure_vectors(run: runs.Run, emb, failures, meta: dict | None,
                     progress: Progress | None) -> tuple[np.ndarray, bool]:
    """(the failures' vectors, whether they came from the run's embeddings.npy): stored vectors are used when this
    embedder made them and they cover every failure."""
    from erroranalysis import embedding

    ids = failures["example_id"].tolist()
    if meta and meta.get("embedder", {}).get("key") == getattr(emb, "key", None) and run.has(runs.EMBEDDINGS):
        stored_ids = [str(i) for i in meta.get("example_ids", [])]
        row_of = {i: r for r, i in enumerate(stored_ids)}
        if all(i in row_of for i in ids):
            stored = np.load(run.file(runs.EMBEDDINGS), mmap_mode="r")
            if stored.ndim == 2 and stored.shape[0] == len(stored_ids):
                return (np.asarray(stored[[row_of[i] for i in ids]], dtype=np.float32) if ids else
                        np.zeros((0, stored.shape[1]), dtype=np.float32)), True
    if isinstance(emb, embedding.MiniLMEmbedder):
        return emb.embed_texts(failures["text"].tolist(), progress), False
    return np.asarray(emb.embed(failures, progress=progress) if _takes_progress(emb) else emb.embed(failures),
                      dtype=np.float32), False


def _takes_progress(emb) -> bool:
    import inspect

    try:
        return "progress" in inspect.signature(emb.embed).parameters
    except (TypeError, ValueError):
        return False


def _reference_vectors(emb, refs, predictions, source: str, progress: Progress | None):
    """Vectors of the taxonomy's labeled examples with the run's embedder, and which refs could be embedded.

    minilm embeds their texts (from the taxonomy, else the run's text of the same id). hidden states and
    precomputed vectors exist only for the run's own examples, so refs are looked up by id (and text, when given).
    """
    from erroranalysis import embedding

    by_id = predictions.set_index("example_id")
    notes = []
    if isinstance(emb, embedding.MiniLMEmbedder):
        texts = []
        keep = np.ones(len(refs), dtype=bool)
        for i, (ex, text) in enumerate(zip(refs["example_id"], refs["text"])):
            if isinstance(text, str):
                texts.append(text)
            elif ex in by_id.index:
                texts.append(str(by_id.at[ex, "text"]))
            else:
                keep[i] = False
        if not keep.all():
            notes.append(f"{int((~keep).sum())} labeled examples have no text in the taxonomy and are not in the "
                         "run, so they are left out (export with texts to use them)")
        if not keep.any():
            raise DataError(f"{source}: its labeled examples carry no texts and none is in this run; export the "
                            "taxonomy with texts ('erroranalysis export RUN --format json').")
        return emb.embed_texts(texts, progress), keep, notes
    positions = []
    keep = np.zeros(len(refs), dtype=bool)
    index = {ex: i for i, ex in enumerate(predictions["example_id"])}
    for i, (ex, text) in enumerate(zip(refs["example_id"], refs["text"])):
        pos = index.get(ex)
        if pos is None:
            continue
        if isinstance(text, str) and str(predictions["text"].iat[pos]) != text:
            continue
        keep[i] = True
        positions.append(pos)
    name = embedding.describe(emb)["name"]
    if not keep.any():
        raise DataError(f"{source}: none of its {len(refs)} labeled examples is in this run (by id and text), and the "
                        f"run's embedder ({name}) has vectors only for the run's own examples; pass --embedder minilm "
                        "to embed the taxonomy's texts instead.")
    if not keep.all():
        notes.append(f"{int((~keep).sum())} of {len(refs)} labeled examples are not in this run, and the {name} "
                     "embedder has vectors only for the run's own examples; they are left out")
    frame = predictions.iloc[positions]
    return np.asarray(emb.embed(frame), dtype=np.float32), keep, notes


# -- suggestions --------------------------------------------------------------------------------------------------


@dataclass
class ApplyResult:
    run: str
    run_key: str
    labels_db: str
    taxonomy: str
    method: str
    k: int
    threshold: float
    threshold_basis: str
    embedder: str
    notes: list[str]
    n_failures: int
    n_references: int
    counts: dict[str, int]          # status -> failures
    per_type: dict[str, int]         # suggested failures per error type
    by_basis: dict[str, int]         # suggested failures by how they were matched
    imported: ImportResult | None
    suggestions: Any = field(repr=False, default=None)  # DataFrame with SUGGESTION_COLUMNS
    written: bool = False

    @property
    def n_suggested(self) -> int:
        return self.counts.get(STATUS_SUGGESTED, 0)

    @property
    def n_unmatched(self) -> int:
        return self.counts.get(STATUS_UNMATCHED, 0)

    def to_dict(self) -> dict:
        return {"run": self.run, "run_key": self.run_key, "labels_db": self.labels_db, "taxonomy": self.taxonomy,
                "method": self.method, "k": self.k, "threshold": round(self.threshold, 6),
                "threshold_basis": self.threshold_basis, "embedder": self.embedder, "notes": self.notes,
                "n_failures": self.n_failures, "n_references": self.n_references, "counts": self.counts,
                "per_type": self.per_type, "by_basis": self.by_basis,
                "imported": None if self.imported is None else {
                    "created": self.imported.created, "reused": self.imported.reused,
                    "updated": self.imported.updated, "clashes": self.imported.clashes}}


def _failures(run: runs.Run):
    predictions = run.predictions()
    file = run.file(runs.PREDICTIONS)
    missing = [c for c in ("example_id", "text", "label", "pred", "correct") if c not in predictions.columns]
    if missing:
        raise DataError(f"{file}: missing column(s) {preview(missing)}; re-run the stage that writes it.")
    predictions = predictions.reset_index(drop=True).copy()
    predictions["example_id"] = predictions["example_id"].astype(str)
    if predictions["example_id"].duplicated().any():
        dup = predictions["example_id"][predictions["example_id"].duplicated()].unique()
        raise DataError(f"{file}, column 'example_id': duplicate ids {preview(dup)}; give every example its own id.")
    predictions["text"] = predictions["text"].fillna("").astype(str)
    predictions["label"] = predictions["label"].astype(str)
    predictions["pred"] = predictions["pred"].astype(str)
    predictions["correct"] = predictions["correct"].fillna(False).astype(bool)
    return predictions


def _check_match_params(method: str, k: int, threshold: float | None) -> None:
    """The matching parameters `suggest` and `apply_taxonomy` share, checked before anything is read or opened."""
    check_param("method", method, method in METHODS, "one of " + ", ".join(METHODS))
    check_param("k", k, isinstance(k, int) and not isinstance(k, bool) and 1 <= k <= 100, "an integer in [1, 100]")
    check_param("threshold", threshold, threshold is None or (isinstance(threshold, (int, float))
                and not isinstance(threshold, bool) and 0 < threshold <= 2), "a cosine distance in (0, 2]")


def suggest(taxonomy: str | Path | dict, run_dir: str | Path, *, store=None, method: str = "centroid", k: int = 5,
            threshold: float | None = None, embedder=None, progress: Progress | None = None,
            name: str | None = None, confusions: bool = True) -> ApplyResult:
    """Match the failures of `run_dir` to the taxonomy's error types; compute only (writes nothing).

    `store` (a LabelStore) is read for the run's existing labels and flags: examples with an accepted label keep
    it, flagged ones ('label is wrong', 'not an error') are left alone, and a type a person rejected for an example
    is not suggested again. With `confusions`, an error type whose labeled examples all share a gold label or a
    prediction only takes failures with that label or prediction (see `confusion_constraints`).
    """
    _check_match_params(method, k, threshold)
    import pandas as pd

    source = name or (str(taxonomy) if not isinstance(taxonomy, dict) else "taxonomy")
    doc = load_taxonomy(taxonomy, source)
    run = runs.Run.open(run_dir)
    task = doc["run"].get("task", "classification")
    if task != run.task:
        raise DataError(f"{source}: a taxonomy of a {task} run cannot be applied to {run.path}, a {run.task} run; "
                        "apply it to a run of the same task.")
    refs = _check_references(doc, source)
    predictions = _failures(run)
    run_key = store.run_key(run.path) if store is not None else run.name
    emb, embed_note = run_embedder(run, predictions, embedder)
    notes = [f"{embed_note}; the taxonomy's labeled texts are embedded with it too"]
    failures = predictions[~predictions["correct"]]  # index = row position, which hidden/file embedders use

    # existing labels of this run
    kept, rejected, flagged = set(), set(), set()
    clusters = {}
    if store is not None:
        a = store.assignments(run_key)
        if len(a):
            accepted = a[a["status"] == "accepted"]
            kept = set(accepted["example_id"].astype(str))
            rej = a[a["status"] == "rejected"]
            rejected = set(zip(rej["example_id"].astype(str), rej["error_type"].astype(str)))
        fl = store.flags(run_key)
        flagged = set(fl["example_id"].astype(str)) if len(fl) else set()
    from erroranalysis.taxonomy import read_cluster_assignments

    assign = read_cluster_assignments(run)
    if assign is not None:
        clusters = dict(zip(assign["example_id"], assign["cluster_id"].astype(int)))

    # embed and match
    ref_vectors, ref_keep, ref_notes = _reference_vectors(emb, refs, predictions, source, progress)
    notes += ref_notes
    refs = refs[ref_keep].reset_index(drop=True)
    type_names = sorted(set(refs["error_type"]), key=str.casefold)
    type_index = {n: i for i, n in enumerate(type_names)}
    ref_types = refs["error_type"].map(type_index).to_numpy(dtype=np.int64)
    without = [t["name"] for t in doc["error_types"] if " ".join(str(t["name"]).split()) not in type_index]
    if without:
        notes.append(f"{len(without)} error types have no labeled example to match by ({preview(without, 3)})")
    if len(failures):
        fail_vectors, stored = _failure_vectors(run, emb, failures, read_embeddings_meta(run), progress)
        if stored:
            notes.append(f"the failures' vectors are the run's own ({runs.EMBEDDINGS})")
        if fail_vectors.shape[1] != ref_vectors.shape[1]:
            raise DataError(f"{run.path}: the failures' vectors have {fail_vectors.shape[1]} dimensions and the "
                            f"taxonomy's {ref_vectors.shape[1]}; re-cluster the run, or pass --embedder minilm.")
        constraints = confusion_constraints(refs) if confusions else {}
        if constraints:
            held = ", ".join(f"{n!r} ({' and '.join(f'{c} {v!r}' for c, v in rule.items())})"
                             for n, rule in list(constraints.items())[:3])
            notes.append(f"{len(constraints)} of {len(type_names)} error types describe one confusion and only take "
                         f"failures that make it: {held}{', ...' if len(constraints) > 3 else ''}")
        allowed = allowed_types(failures, type_names, constraints) if constraints else None
        matches = match_vectors(fail_vectors, ref_vectors, ref_types, method=method, k=k, threshold=threshold,
                                allowed=allowed)
        thr, basis = matches.threshold, matches.threshold_basis
    else:
        matches = allowed = None
        thr, basis = (threshold, f"given: {threshold:g}") if threshold is not None else \
            auto_threshold(ref_vectors, ref_types, method)

    rows = []
    same = {e: (ty, te if isinstance(te, str) else None, pr)
            for e, ty, te, pr in zip(refs["example_id"], refs["error_type"], refs["text"], refs["pred"])}
    for i, r in enumerate(failures.itertuples(index=False)):
        ex = r.example_id
        closest = type_names[matches.closest[i]]
        would = type_names[matches.type_index[i]] if matches.type_index[i] >= 0 else None
        row = {"example_id": ex, "label": r.label, "pred": r.pred, "status": STATUS_UNMATCHED, "error_type": None,
               "closest_type": closest, "basis": method, "distance": float(matches.distance[i]),
               "vote": float(matches.vote[i]), "nearest_id": str(refs["example_id"].iat[matches.nearest[i]]),
               "cluster_id": int(clusters.get(ex, -1))}
        if matches.excluded[i]:
            row["basis"] = "other confusion"
        ref = same.get(ex)
        if ref is not None and (ref[1] is None or ref[1] == r.text) and \
                (allowed is None or allowed[i, type_index[ref[0]]]):
            would = ref[0]  # the same example keeps its type (unless the type is another confusion's)
            row.update(closest_type=would, basis="same example", distance=0.0, vote=1.0, nearest_id=ex)
        if ex in kept:
            row["status"] = STATUS_KEPT
        elif ex in flagged:
            row["status"] = STATUS_FLAGGED
        elif would is not None and (ex, would) in rejected:
            row["status"] = STATUS_REJECTED
        elif would is not None:
            row.update(status=STATUS_SUGGESTED, error_type=would)
        rows.append(row)
    table = pd.DataFrame(rows, columns=SUGGESTION_COLUMNS)
    table["distance"] = table["distance"].astype(np.float32)
    table["vote"] = table["vote"].astype(np.float32)
    table["cluster_id"] = table["cluster_id"].astype(np.int64)
    suggested = table[table["status"] == STATUS_SUGGESTED]
    return ApplyResult(
        run=str(run.path), run_key=run_key, labels_db=str(store.path) if store is not None else "",
        taxonomy=source, method=method, k=k, threshold=float(thr), threshold_basis=basis,
        embedder=getattr(emb, "key", type(emb).__name__), notes=notes, n_failures=int(len(failures)),
        n_references=int(len(refs)), counts={s: int(n) for s, n in table["status"].value_counts().items()},
        per_type={str(k_): int(v) for k_, v in suggested["error_type"].value_counts().items()},
        by_basis={str(k_): int(v) for k_, v in suggested["basis"].value_counts().items()},
        imported=None, suggestions=table)


def apply_taxonomy(taxonomy: str | Path | dict, run_dir: str | Path, *, labels_db: str | Path | None = None,
                   store=None, method: str = "centroid", k: int = 5, threshold: float | None = None, embedder=None,
                   on_clash: str = "reuse", user: str | None = None, progress: Progress | None = None,
                   name: str | None = None, confusions: bool = True) -> ApplyResult:
    """Suggest error types for the run's failures and store them: the taxonomy's error types are imported into the
    labels store (see import_taxonomy), each matched failure is assigned as `source='suggested'`,
    `status='pending'`, and every failure's match is written to `<run>/taxonomy_suggestions.parquet`; the manifest
    records an `apply_taxonomy` stage. Earlier pending suggestions of this run that are no longer made are removed.
    Everything is checked and computed before the first write."""
    from erroranalysis.labels import LabelStore, default_db_path

    check_param("on_clash", on_clash, on_clash in ON_CLASH, "one of " + ", ".join(ON_CLASH))
    _check_match_params(method, k, threshold)
    source = name or (str(taxonomy) if not isinstance(taxonomy, dict) else "taxonomy")
    doc = load_taxonomy(taxonomy, source)
    _check_references(doc, source)
    run = runs.Run.open(run_dir)
    if store is None:
        db = Path(labels_db) if labels_db is not None else default_db_path(run.path.resolve().parent)
        if db.is_dir():
            raise UserError(f"{db}: is a directory; pass the labels database file to --labels-db.")
        store = LabelStore(db, user=user)
    plan_import(doc, store, on_clash=on_clash)  # refuses a clash before anything is computed or written
    result = suggest(doc, run.path, store=store, method=method, k=k, threshold=threshold, embedder=embedder,
                     progress=progress, name=source, confusions=confusions)
    table = result.suggestions
    params = {"taxonomy": result.taxonomy, "method": method, "k": k, "threshold": round(result.threshold, 6),
              "threshold_given": threshold is not None, "confusions": confusions, "embedder": result.embedder,
              "labels_db": str(store.path)}
    with run.stage(STAGE, params) as facts:
        result.imported = import_taxonomy(doc, store, on_clash=on_clash)
        key = result.run_key
        wanted = table[table["status"] == STATUS_SUGGESTED]
        existing = store.assignments(key)
        stale = existing[(existing["source"] == "suggested") & (existing["status"] == "pending")]
        keep_pairs = set(zip(wanted["example_id"], wanted["error_type"]))
        drop = [e for e, t in zip(stale["example_id"], stale["error_type"]) if (e, t) not in keep_pairs]
        if drop:
            store.unassign(key, drop, summary=f"removed {len(drop)} earlier suggestions no longer made "
                                              "(apply-taxonomy)")
        for name, group in wanted.groupby("error_type", sort=True):
            type_id = result.imported.type_ids[name]
            ids = group["example_id"].tolist()
            cl = {e: int(c) for e, c in zip(ids, group["cluster_id"]) if int(c) >= 0}
            store.assign(key, ids, type_id, source="suggested", cluster_ids=cl,
                         summary=f"suggested {len(ids)} examples as {name!r} (apply-taxonomy)")
        runs.write_parquet(run.file(SUGGESTIONS), table)
        facts.update({"n_failures": result.n_failures, "n_suggested": result.n_suggested,
                      "n_unmatched": result.n_unmatched, "threshold_basis": result.threshold_basis,
                      "counts": result.counts})
    result.written = True
    return result


def read_suggestions(run: runs.Run):
    """taxonomy_suggestions.parquet of a run, or None when apply-taxonomy never ran on it."""
    if not run.has(SUGGESTIONS):
        return None
    df = run.read_parquet(SUGGESTIONS, STAGE)
    missing = [c for c in SUGGESTION_COLUMNS if c not in df.columns]
    if missing:
        raise RunError(f"{run.file(SUGGESTIONS)}: missing column {missing[0]!r}; run apply-taxonomy again.")
    df = df.copy()
    df["example_id"] = df["example_id"].astype(str)
    return df


def review(store, run_key: str, example_ids: Sequence[str], accept: bool):
    """Accept (they become labels) or reject pending suggestions of one run, in one logged change."""
    ids = [str(i) for i in example_ids]
    if not ids:
        raise UserError("select suggestions first.")
    a = store.assignments(run_key)
    pending = set(a[(a["source"] == "suggested") & (a["status"] == "pending")]["example_id"].astype(str)) \
        if len(a) else set()
    chosen = [i for i in ids if i in pending]
    if not chosen:
        raise UserError("none of the selected examples has a suggestion awaiting review.")
    return store.set_status(run_key, chosen, "accepted" if accept else "rejected")


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
