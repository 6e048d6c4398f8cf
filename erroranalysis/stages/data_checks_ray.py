"""The checks stage under `--engine ray`: every pass over the rows runs on the workers, each reading its own block of
predictions.parquet and probs.npy; the driver holds counts, a bounded number of candidates and the run's record.

For any run (the default checks; with `--train`, the leakage and shift in `check_ray_train.py`, of every task but
generation, whose training file is checked for contamination in `contamination_ray.py`),
one flow whose label-issue part follows the run's `label_rule` (classification: confident learning over probs.npy;
multilabel: cleanlab's multi-label rule, one binary problem per class; none for generation, regression, token
classification and runs without probabilities, where checks.json says why as in-process):

1. scan (before the stage starts, so a bad cell fails it as in-process): each block counts its missing ids and
   `correct` values (readers' one-line error from the sums), validates its labels and probabilities (the same one-line
   error), sums each problem's class counts and p(class) (cleanlab's thresholds), writes its rows' 16-byte text keys
   into `n_buckets` partitions (`blockwise.bucket_of`), and embeds the rows the searches need (its rows of the
   near-duplicate sample; with the neighbour vote, every row);
2. the neighbour vote (classification, when the plan uses vectors for label issues): each block's rows against the
   reference sample in-process uses (every row up to 20,000, else a seeded 20,000), giving the mixed probabilities;
3. near duplicates: one task searches the seeded sample of `near_sample` rows (every row up to that many) as the
   in-process search does over every row, and sends back the pairs of text keys it joins;
4. exact duplicates: one task per key partition groups its keys, writes each row's group (first row, conflict)
   per block, and counts the first rows per block, from which group numbers follow (`blockwise.group_numbers`);
   steps 3 and 4 are in `check_ray_duplicates.py`;
5. label issues: per problem the confident joint, then the cells' score histograms and boundary candidates
   (`erroranalysis.datachecks.blockwise`): flags equal to cleanlab's on every row at once (multi-label: the OR of
   the classes' binary flags, as cleanlab reduces it);
6. write: each block writes its rows of checks.parquet as a shard into the stage's staging area and sends back its
   share of the summary; checks.json is merged from those.

What differs from in-process, and is stated in checks.json (`duplicates.searched`) and the stage record: near
duplicates are searched among the sample only (in-process: every row); above 200,000 rows the in-process flags come
from cleanlab's batched estimate, the Ray ones from the exact rule. Scratch files (key partitions, vectors, the
training file's state) go where `inputs.stage_scratch` says: for a run being built for object storage, a prefix under
its objects, so no node need see the driver's disk; else a hidden folder of the run that every worker sees. They
are removed at the end.
"""

from __future__ import annotations

import functools

import numpy as np

from erroranalysis import rundir
from erroranalysis.core import schemas, shards
from erroranalysis.core.sampling import seeded_rows
from erroranalysis.datachecks import blockwise as bw
from erroranalysis.engines import blocks as eb
from erroranalysis.stages import check_ray_train
from erroranalysis.stages.check_parts import no_leakage
from erroranalysis.stages.check_ray_duplicates import binary16 as _binary16
from erroranalysis.stages.check_ray_duplicates import duplicate_columns, duplicates, load_shards
from erroranalysis.stages.check_ray_duplicates import save_shard as _save
from erroranalysis.stages.check_ray_duplicates import within as _within
from erroranalysis.stages.check_ray_duplicates import write_npy as _write_npy
from erroranalysis.stages.check_ray_leakage import leak_columns

COLUMNS = ["example_id", "text", "label", "correct"]
GOLD = {"classification": ["label"], "multilabel": ["gold_labels"], None: []}  # what the label-issue passes read
UNREAD = ("--train: the workers read a Parquet, JSONL or CSV training file or a save_to_disk folder only; the checks "
          "run on the driver")


def supported(run, params, train_set, embed) -> str | None:
    """Why the Ray path cannot take this run (the caller says so and runs the checks in-process), or None."""
    if run.task == "generation" and train_set is None and params.train is not None:  # contamination_ray.py
        from erroranalysis.stages.contamination_ray import workers_read

        if not workers_read(params):
            return UNREAD
    elif train_set is not None or params.train is not None:
        if not check_ray_train.workers_read(params, train_set):
            return UNREAD
    return None


def label_rule(run) -> str | None:
    """The label-issue check the in-process stage runs on `run`: "classification" (confident learning over
    probs.npy), "multilabel" (cleanlab's multi-label one), or None: no label issues, checks.json says why
    (`report.label_issues_skipped`)."""
    from erroranalysis.rundir import readers

    if run.task == "regression" or not readers.usable(run, rundir.PROBS):
        return None
    if run.task == "multilabel":
        return "multilabel"
    return "classification" if len(run.labels) >= 2 else None


class Embedding:
    """What the workers embed with, picklable: the run's hidden states, a text embedder rebuilt in each worker
    from its constructor arguments, or a function."""

    def __init__(self, source: str, *, hidden: str | None = None, embedder=None, fn=None):
        self.source, self.hidden, self.fn = source, hidden, fn
        self.cls = type(embedder) if embedder is not None else None
        self.kwargs = tuple(sorted(embedder.constructor_kwargs().items())) if embedder is not None else ()

    def __call__(self, texts: list[str], block, positions: np.ndarray) -> np.ndarray:
        if self.hidden is not None:
            return np.asarray(eb.read_npy_rows(self.hidden, block)[positions], dtype=np.float32)
        if self.fn is not None:
            return np.asarray(self.fn([texts[i] for i in positions]), dtype=np.float32)
        return np.asarray(_embedder(self.cls, self.kwargs).embed_texts([texts[i] for i in positions]),
                          dtype=np.float32)


@functools.lru_cache(maxsize=2)
def _embedder(cls, kwargs):
    return cls(**dict(kwargs))  # one per worker process: the model loads once


def checks_ray(run, params, record: dict, embedding: Embedding | None, vote: bool, engine, reporter,
               train: dict | None = None, contamination=None) -> dict:
    """Run the default checks on Ray and commit checks.parquet (shards) and checks.json; returns the summary.
    `vote`: the plan gives label issues a neighbour vote (taken only where there are label issues). `train`
    ({"set": an EvalSet or None, "domain": bool}): the leakage and shift of `params.train` or that set
    (`check_ray_train`); `contamination`: a generation run's training file, prepared (`contamination_ray`)."""
    from erroranalysis.datachecks import report as checks_report
    from erroranalysis.datachecks.label_issues import reference_rows
    from erroranalysis.rundir import readers

    rule = label_rule(run)
    vote = vote and rule == "classification"
    path = readers.shared_path(run, rundir.PREDICTIONS)  # a URL for a run on object storage: every worker reads it
    rpb = eb.ROWS_PER_BLOCK  # read at call time: tests make blocks small
    blocks = eb.plan(path, rpb)
    n = eb.n_rows(blocks)
    near = embedding is not None
    sample = seeded_rows(n, params.near_sample, params.seed) if near else np.zeros(0, np.int64)
    ref = reference_rows(n, 20_000, params.seed) if vote else np.zeros(0, np.int64)
    n_buckets = max(1, min(len(blocks), 64))
    record["engine"] = "ray"
    record["sample"] = {"rows": int(len(sample)), "of": n, "seed": params.seed} if near else None
    if near and len(sample) < n:
        reporter.note(f"checks: --engine ray: near duplicates searched among a seeded sample of {len(sample)} of "
                      f"{n} rows (--near-sample)")
    from erroranalysis.stages.inputs import stage_scratch

    # read back by other workers; not in .staging (the stage sweeps that)
    with stage_scratch(run.path, ".checks-scratch-", engine) as scratch:
        probs = str(readers.shared_path(run, rundir.PROBS)) if rule else None
        ctx = {"probs": probs, "labels": list(run.labels), "scratch": str(scratch), "source": probs, "rule": rule,
               "columns": GOLD[rule]}
        columns = COLUMNS + [c for c in GOLD[rule] if c not in COLUMNS]
        scanned = eb.map_blocks(_scan, path, engine, columns=columns, rows_per_block=rpb, kwargs={
            **ctx, "n_buckets": n_buckets, "sample": sample, "ref": ref, "embedding": embedding, "vote": vote})
        sums: list = []  # per label-issue problem: (count of each given class, sum of p(class) over them)
        missing = {"example_id": 0, "correct": 0}
        for _, got in scanned:
            for column in missing:
                missing[column] += got["missing"][column]
            sums = [(a[0] + b[0], a[1] + b[1]) for a, b in zip(sums, got["sums"])] if sums else got["sums"]
        readers.check_missing(path, missing)  # readers' one-line error, from the blocks' counts
        trained = train and check_ray_train.prepare(run, params, train, scratch, n, n_buckets, embedding, engine,
                                                    record, reporter)
        with run.stage("checks", record) as staging, reporter.stage("checks") as advance:
            mixed = ctx["probs"]
            if vote:
                prior = sums[0][0].astype(np.float32) / max(n, 1)
                mixed_sums = np.zeros(len(run.labels))
                for _, s in eb.map_blocks(_vote, path, engine, columns=["label"], rows_per_block=rpb, kwargs={
                        **ctx, "prior": prior, "k": params.label_issue_k, "weight": params.label_issue_neighbors}):
                    mixed_sums += s
                sums = [(sums[0][0], mixed_sums)]
                mixed = str(scratch / "mixed")
            dups = duplicates(scratch, blocks, n_buckets, near, params, engine)
            leak = trained and check_ray_train.write_state(trained, scratch, [b.start for b in blocks], n_buckets,
                                                           params, engine)
            label_state = _label_issues(path, engine, {**ctx, "rows_per_block": rpb, "mixed": mixed}, sums,
                                        params.filter_by) if rule else None
            parts = dict(eb.map_blocks(_write, path, engine, columns=columns, progress=advance, rows_per_block=rpb, kwargs={
                **ctx, "mixed": mixed, "method": params.label_issue_method, "filter_by": params.filter_by,
                "state": label_state, "dups": dups["per_row"], "leak": leak,
                "out": str(staging.shards(rundir.CHECKS, engine)),
                "contamination": contamination.columns if contamination is not None else None}))
            report = {"n_examples": n, "params": record,
                      "label_issues": bw.merge_summary([parts[b] for b in blocks], params.label_issue_method,
                                                       params.filter_by) if rule else
                      checks_report.label_issues_skipped(run.task, readers.usable(run, rundir.PROBS))}
            report["label_issues"]["neighbors"] = {
                "weight": params.label_issue_neighbors, "k": params.label_issue_k,
                "vectors": embedding.source} if vote and params.label_issue_neighbors else None
            report["duplicates"] = {"near": near, "threshold": params.near_threshold, **dups["summary"],
                                    "searched": record["sample"]}
            report["contamination"] = report["leakage"] = report["shift"] = None
            if trained:
                report["leakage"], report["shift"] = check_ray_train.sections(
                    trained, [parts[b]["leakage"] for b in blocks], record, path, scratch, params, engine)
            report["findings"] = [f.to_dict() for f in checks_report.checks_findings(report)]
            if contamination is not None:  # a generation run's training file (`contamination_ray.prepare`)
                from erroranalysis.stages.contamination import add_section

                add_section(report, contamination.section)
            staging.write_json(rundir.CHECKS_JSON, report)
            summary = {**checks_report.summary(report), "near_sample": record["sample"]}
            staging.facts.update({k: v for k, v in summary.items() if k != "findings"})
        return summary



# -- the passes (module-level: Ray pickles them) -----------------------------------------------------------------


def _ids_probs(table, block, probs, labels, source, **_):
    from erroranalysis.datachecks.label_issues import validate

    gold = np.asarray(table.column("label").to_pylist(), dtype=object)
    return validate(gold, eb.read_npy_rows(probs, block), labels, source=source, first_row=block.start)


def _scan(table, block, *, scratch, n_buckets, sample, ref, embedding, vote, **ctx):
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from erroranalysis.datachecks.duplicates import text_keys

    missing = {c: int(pc.sum(pc.is_null(table.column(c), nan_is_null=True)).as_py() or 0)
               for c in ("example_id", "correct")}
    problems = _problems(table, block, mixed=ctx["probs"], **ctx) if ctx["rule"] else []
    texts = table.column("text").to_pylist()
    rows = np.arange(block.start, block.stop)
    keys = text_keys(texts)
    bucket = bw.bucket_of(keys, n_buckets)
    labels = np.asarray(table.column("label").to_pylist(), dtype=object).astype(str)
    example_ids = np.asarray(table.column("example_id").to_pylist(), dtype=object).astype(str)
    for p in np.unique(bucket):
        mine = bucket == p
        part = pa.table({"key": _binary16(keys[mine]), "row": rows[mine],
                         "label": labels[mine].tolist(), "example_id": example_ids[mine].tolist()})
        shards.write(shards.location(scratch) / "hashes" / str(p), eb.SHARD.format(start=block.start),
                     lambda f, t=part: pq.write_table(t, f), digest=False)
    if embedding is not None:
        in_sample = _within(sample, block)
        in_ref = _within(ref, block)
        wanted = np.arange(block.rows) if vote else in_sample
        vectors = embedding(texts, block, wanted) if len(wanted) else np.zeros((0, 0), np.float32)
        at = (lambda pos: pos) if vote else (lambda pos: np.searchsorted(wanted, pos))
        _save(scratch, "sample", block, vectors[at(in_sample)], keys=keys[in_sample], rows=rows[in_sample])
        if vote:
            _save(scratch, "vectors", block, vectors)
            _save(scratch, "ref", block, vectors[in_ref], rows=rows[in_ref], labels=problems[0][0][in_ref])
    return {"missing": missing, "sums": [bw.class_sums(ids, probs) for ids, probs in problems]}


def _vote(table, block, *, scratch, prior, k, weight, **ctx):
    from erroranalysis.datachecks.label_issues import reference_label_probs

    ids, probs = _ids_probs(table, block, **ctx)
    stem = eb.SHARD.format(start=block.start)[:-len(".parquet")]
    vectors = np.array(shards.load_npy(shards.location(scratch) / "vectors" / f"{stem}.npy"))  # writable
    reference, columns = load_shards(scratch, "ref")
    rows = np.arange(block.start, block.stop)
    neighbours = reference_label_probs(vectors, rows, reference, columns.get("rows", np.zeros(0, np.int64)),
                                       columns.get("labels", np.zeros(0, np.int64)), prior, k=k)
    mixed = (1 - weight) * probs + weight * neighbours
    _write_npy(shards.location(scratch) / "mixed", f"{stem}.npy", mixed)
    return bw.class_sums(ids, mixed)[1]


def _label_issues(path, engine, ctx, sums: list, filter_by) -> dict:
    """Per label-issue problem, the per-cell boundaries of the flags (three passes), or what the simpler rules need;
    "possible": False where the in-process check flags nothing (`multilabel_issues.flags_possible`)."""
    from erroranalysis.datachecks.multilabel_issues import flags_possible

    ctx = dict(ctx)
    rpb = ctx.pop("rows_per_block")
    thresholds = [bw.confident_thresholds(counts, total) for counts, total in sums]
    states = [{"thresholds": t, "n_present": int((counts > 0).sum()), "bounds": {}, "chosen": {}}
              for t, (counts, _) in zip(thresholds, sums)]
    state = {"problems": states, "possible": ctx["rule"] != "multilabel" or flags_possible(
        [counts for counts, _ in sums], filter_by)}
    if filter_by in ("confident_learning", "predicted_neq_given") or not state["possible"]:
        return state
    columns = ctx["columns"]
    joint = _summed(eb.map_blocks(_joint, path, engine, columns=columns, rows_per_block=rpb,
                                  kwargs={**ctx, "thresholds": thresholds}))
    quotas = [bw.prune_matrix(j, counts) for j, (counts, _) in zip(joint, sums)]
    active = [bw.active_cells(filter_by, q) & (s["n_present"] >= 2) for q, s in zip(quotas, states)]
    if not any(a.any() for a in active):
        return state
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    hists = [empty] * len(states)
    for _, part in eb.map_blocks(_histogram, path, engine, columns=columns, rows_per_block=rpb,
                                 kwargs={**ctx, "active": active}):
        hists = [bw.merge_sparse([h, p]) for h, p in zip(hists, part)]  # as they come: bounded by cells x BINS
    bounds = [bw.boundaries(h, q) for h, q in zip(hists, quotas)]
    candidates: list = [[] for _ in states]
    for _, found in eb.map_blocks(_candidates, path, engine, columns=columns, rows_per_block=rpb,
                                  kwargs={**ctx, "bounds": bounds}):
        for mine, more in zip(candidates, found):
            mine.extend(more)
    for s, b, c in zip(states, bounds, candidates):
        s.update(bounds=b, chosen=bw.select_boundary(c, b))
    return state


def _summed(results) -> list:
    """Elementwise sum of the blocks' per-problem lists of arrays."""
    total: list = []
    for _, part in results:
        total = [a + b for a, b in zip(total, part)] if total else list(part)
    return total


def _mixed(table, block, *, mixed, **ctx):
    ids, probs = _ids_probs(table, block, **ctx)
    if mixed != ctx["probs"]:
        probs = eb.read_npy_rows(mixed, block)
    return ids, probs


def _gold_sets(table, labels) -> np.ndarray:
    from erroranalysis.stages.metrics import gold_matrix

    return gold_matrix(table.select(["gold_labels"]).to_pandas(), "gold_labels", labels)


def _problems(table, block, *, rule, mixed, **ctx) -> list[tuple[np.ndarray, np.ndarray]]:
    """The block's label-issue problems as (given class ids, probabilities): a classification run's one (with the
    neighbour vote, its mixed probabilities); a multi-label run's binary problem per class (cleanlab's
    one-vs-rest reduction, `multilabel_issues.binary_problems`)."""
    if rule == "multilabel":
        from erroranalysis.datachecks.multilabel_issues import binary_problems, clip

        return binary_problems(_gold_sets(table, ctx["labels"]), clip(eb.read_npy_rows(ctx["probs"], block)))
    return [_mixed(table, block, mixed=mixed, **ctx)]


def _joint(table, block, *, thresholds, **ctx):
    return [bw.joint_counts(i, p, t) for (i, p), t in zip(_problems(table, block, **ctx), thresholds)]


def _histogram(table, block, *, active, **ctx):
    return [bw.cell_histogram(i, p, a) for (i, p), a in zip(_problems(table, block, **ctx), active)]


def _candidates(table, block, *, bounds, **ctx):
    rows = np.arange(block.start, block.stop)
    return [bw.boundary_candidates(i, p, rows, b) for (i, p), b in zip(_problems(table, block, **ctx), bounds)]


def _write(table, block, *, out, method, filter_by, state, dups, leak, scratch, contamination=None, **ctx):
    import pandas as pd
    import pyarrow as pa

    rows = np.arange(block.start, block.stop)
    if state is None:  # no label issues for this run (`label_rule`): the columns empty, as in-process
        scores = np.full(block.rows, np.nan, dtype=np.float32)
        flagged = suggested = np.full(block.rows, None, dtype=object)
    else:
        scores, flagged, suggested = _label_columns(table, block, rows, method, filter_by, state, **ctx)
    group, kind, conflict = duplicate_columns(table, block, rows, dups, scratch)
    example_ids = np.asarray(table.column("example_id").to_pylist(), dtype=object)
    frame = pd.DataFrame({"example_id": example_ids, "label_issue_score": scores,
                          "label_issue": flagged, "suggested_label": suggested,
                          "duplicate_group": group, "duplicate_kind": kind, "duplicate_conflict": conflict})
    no_leakage(frame, {})
    leaked = leak and leak_columns(frame, table, block, leak, leak["labels"], leak["ids"])
    if contamination is not None:
        from erroranalysis.stages.contamination import set_columns
        from erroranalysis.stages.contamination_ray import block_columns

        set_columns(frame, block_columns(contamination, block))
    eb.write_shard(out, block, pa.Table.from_pandas(frame[list(schemas.CHECKS.columns)], preserve_index=False))
    if state is None:
        return {"leakage": leaked}
    gold = np.asarray(table.column("label").to_pylist(), dtype=object)
    correct = np.asarray(table.column("correct").to_pylist(), dtype=bool)
    return {**bw.summary_part(scores, flagged, correct, rows, example_ids, gold, suggested), "leakage": leaked}


def _label_columns(table, block, rows, method, filter_by, state, **ctx):
    """A block's label-issue scores, flags and suggested labels."""
    problems = _problems(table, block, **ctx)
    flagged = np.zeros(block.rows, dtype=bool)
    for (ids, probs), mine in zip(problems, state["problems"]) if state["possible"] else ():
        flagged |= _flags(ids, probs, rows, filter_by, mine)  # multi-label: flagged in any class's problem
    if ctx["rule"] == "multilabel":
        from erroranalysis.datachecks.multilabel_issues import clip, multilabel_scores

        scores, suggested = multilabel_scores(_gold_sets(table, ctx["labels"]), clip(
            eb.read_npy_rows(ctx["probs"], block)), ctx["labels"], method)
        return scores, flagged, np.asarray(suggested, dtype=object)
    import warnings

    from cleanlab.rank import get_label_quality_scores

    ids, mixed = problems[0]
    _, probs = _ids_probs(table, block, **ctx)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quality = get_label_quality_scores(ids, mixed, method=method)
    scores = (1.0 - np.asarray(quality, dtype=np.float64)).clip(0, 1).astype(np.float32)
    names = np.asarray([str(c) for c in ctx["labels"]], dtype=object)
    others = np.array(probs, dtype=np.float32, copy=True)
    others[np.arange(len(ids)), ids] = -np.inf
    return scores, flagged, names[others.argmax(1)].astype(str).astype(object)


def _flags(ids, probs, rows, filter_by, state) -> np.ndarray:
    if filter_by == "confident_learning":
        return bw.confident_learning_flags(ids, probs, state["thresholds"])
    return bw.flags(ids, probs, rows, filter_by, state["bounds"], state["chosen"], state["n_present"])
