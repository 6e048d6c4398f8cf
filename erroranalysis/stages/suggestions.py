"""Carry a labeled taxonomy over to another run or workspace: import its error types, and suggest error types for a
new run's failures from the labeled examples it carries.

    from erroranalysis import stages

    result = stages.apply_taxonomy("taxonomy.json", "runs/candidate")  # suggestions ('suggested', 'pending')
    stages.review(store, result.run_key, ["194", "201"], accept=True)  # they become labels

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

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from erroranalysis import rundir
from erroranalysis.core import schemas
from erroranalysis.core.errors import DataError, UserError, preview
from erroranalysis.core.validation import check_param
from erroranalysis.labels.importing import ON_CLASH, ImportResult, import_taxonomy, load_taxonomy, plan_import
from erroranalysis.labels.matching import (
    STATUS_FLAGGED,
    STATUS_KEPT,
    STATUS_REJECTED,
    STATUS_SUGGESTED,
    STATUS_UNMATCHED,
    MatchParams,
    allowed_types,
    auto_threshold,
    check_references,
    confusion_constraints,
    family_matches,
    match_vectors,
)
from erroranalysis.labels.taxonomy import parent_of as parent_type
from erroranalysis.rundir import SUGGESTIONS, readers
from erroranalysis.stages.embedders import run_embedder

STAGE = "apply_taxonomy"




Progress = Callable[[int, int], None]


def _failure_vectors(run: rundir.Run, emb, failures, progress: Progress | None) -> tuple[np.ndarray, bool]:
    """(the failures' vectors, whether they came from the run's embeddings.npy): stored vectors are used when this
    embedder made them and they cover every failure."""
    from erroranalysis.embed import models as embedding

    ids = failures["example_id"].tolist()
    found = readers.read_embeddings(run, optional=True)
    if found is not None and found[1]["embedder"].get("key") == getattr(emb, "key", None):
        stored, meta = found
        row_of = {str(i): r for r, i in enumerate(meta["example_ids"])}
        if all(i in row_of for i in ids):
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
    from erroranalysis.embed import models as embedding

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
    suggestions: Any = field(repr=False, default=None)  # DataFrame with the columns of schemas.SUGGESTIONS
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


def _failures(run: rundir.Run):
    return readers.read_predictions(run)


def suggest(taxonomy: str | Path | dict, run_dir: str | Path, *, store=None, params: MatchParams = MatchParams(),
            embedder=None, progress: Progress | None = None, name: str | None = None, **values) -> ApplyResult:
    """Match the failures of `run_dir` to the taxonomy's error types; compute only (writes nothing).

    `store` (a LabelStore) is read for the run's existing labels and flags: examples with an accepted label keep
    it, flagged ones ('label is wrong', 'not an error') are left alone, and a type a person rejected for an example
    is not suggested again. With `confusions`, an error type whose labeled examples all share a gold label or a
    prediction only takes failures with that label or prediction (see `confusion_constraints`). `params` (keyword
    values override it): see `labels.MatchParams`.
    """
    import pandas as pd

    params = params.replace(**values) if values else params
    method, k, threshold, confusions = params.method, params.k, params.threshold, params.confusions

    source = name or (str(taxonomy) if not isinstance(taxonomy, dict) else "taxonomy")
    doc = load_taxonomy(taxonomy, source)
    run = rundir.Run.open(run_dir)
    task = doc["run"].get("task", "classification")
    if task != run.task:
        raise DataError(f"{source}: a taxonomy of a {task} run cannot be applied to {run.path}, a {run.task} run; "
                        "apply it to a run of the same task.")
    refs = check_references(doc, source)
    predictions = _failures(run)
    run_key = store.run_key(run) if store is not None else run.name
    emb, embed_note = run_embedder(run, predictions, embedder if embedder is not None else params.embedder)
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
    assign = readers.read_assignments(run, optional=True)
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
        fail_vectors, stored = _failure_vectors(run, emb, failures, progress)
        if stored:
            notes.append(f"the failures' vectors are the run's own ({rundir.EMBEDDINGS})")
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
        parent_of = {" ".join(str(t["name"]).split()): parent_type(t) for t in doc["error_types"]}
        family = family_matches(fail_vectors, ref_vectors, refs["error_type"].tolist(), parent_of,
                                (matches.type_index < 0) & ~matches.excluded, method=method, k=k, threshold=threshold)
        if (family != None).any():  # noqa: E711  (an object array of names and None)
            notes.append(f"{int((family != None).sum())} failures no error type took are as close to a family of "  # noqa: E711
                         "types (a parent with its sub-types) as its own examples: suggested as the parent")
    else:
        matches = allowed = family = None
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
        elif would is None and family[i] is not None:
            would = family[i]
            row.update(closest_type=would, basis=f"{method} (family)")
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
    table = pd.DataFrame(rows, columns=list(schemas.SUGGESTIONS.columns))
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
                   store=None, params: MatchParams = MatchParams(), embedder=None, on_clash: str = "reuse",
                   user: str | None = None, progress: Progress | None = None, name: str | None = None,
                   **values) -> ApplyResult:
    """Suggest error types for the run's failures and store them: the taxonomy's error types are imported into the
    labels store (see import_taxonomy), each matched failure is assigned as `source='suggested'`,
    `status='pending'`, and every failure's match is written to `<run>/taxonomy_suggestions.parquet`; the manifest
    records an `apply_taxonomy` stage. Earlier pending suggestions of this run that are no longer made are removed.
    Everything is checked and computed before the first write, and the labels are written in ONE transaction,
    logged as one event by the writer kind 'suggestion': all of them are stored, or (on any failure) none."""
    from erroranalysis.labels import LabelStore, ReadOnlyError, labels_db_for

    check_param("on_clash", on_clash, on_clash in ON_CLASH, "one of " + ", ".join(ON_CLASH))
    params = params.replace(**values) if values else params
    source = name or (str(taxonomy) if not isinstance(taxonomy, dict) else "taxonomy")
    doc = load_taxonomy(taxonomy, source)
    check_references(doc, source)
    run = rundir.Run.open(run_dir)
    if store is None:
        db = Path(labels_db) if labels_db is not None else labels_db_for(run.path)
        if db.is_dir():
            raise UserError(f"{db}: is a directory; pass the labels database file to --labels-db.")
        store = LabelStore(db, user=user, writer="suggestion")
    if not store.can_write:  # refused before the run is touched (the stage would write it first)
        raise ReadOnlyError(store.read_only_reason)
    plan_import(doc, store, on_clash=on_clash)  # refuses a clash before anything is computed or written
    result = suggest(doc, run.path, store=store, params=params, embedder=embedder, progress=progress, name=source)
    table = result.suggestions
    record = {"taxonomy": result.taxonomy, "method": params.method, "k": params.k,
              "threshold": round(result.threshold, 6),
              "threshold_given": params.threshold is not None, "confusions": params.confusions,
              "embedder": result.embedder, "labels_db": str(store.path)}
    with run.stage(STAGE, record) as staging:
        with store.batch(action="apply_taxonomy", run=result.run_key, writer="suggestion") as b:
            result.imported = import_taxonomy(doc, b, on_clash=on_clash)
            key = result.run_key
            wanted = table[table["status"] == STATUS_SUGGESTED]
            existing = b.assignments(key)
            stale = existing[(existing["source"] == "suggested") & (existing["status"] == "pending")]
            keep_pairs = set(zip(wanted["example_id"], wanted["error_type"]))
            drop = [e for e, t in zip(stale["example_id"], stale["error_type"]) if (e, t) not in keep_pairs]
            removed = b.unassign(key, drop).changed if drop else 0
            stored = 0
            for name, group in wanted.groupby("error_type", sort=True):
                ids = group["example_id"].tolist()
                cl = {e: int(c) for e, c in zip(ids, group["cluster_id"]) if int(c) >= 0}
                stored += b.assign(key, ids, result.imported.type_ids[name], source="suggested",
                                   cluster_ids=cl).changed
            b.summary = (f"apply-taxonomy {Path(result.taxonomy).name}: {stored} suggestions stored"
                         + (f", {removed} earlier suggestions no longer made removed" if removed else "")
                         + (f", {len(result.imported.created)} error types created" if result.imported.created
                            else ""))
            staging.write_parquet(SUGGESTIONS, table)  # inside the batch: a failed write stores no labels
        staging.facts.update({"n_failures": result.n_failures, "n_suggested": result.n_suggested,
                      "n_unmatched": result.n_unmatched, "threshold_basis": result.threshold_basis,
                      "counts": result.counts, "labels_event": b.change.event_id})
    result.written = True
    return result


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
