"""`erroranalysis run --task token-classification`: a token classifier (NER, POS, chunking) over sentences, then
metrics, slices and clusters over its error spans.

Everything the user can get wrong (the model's head and tag scheme, the columns, tags not one per token, unknown
tags, spans out of range) is checked before the run directory exists. The infer stage then commits together:

- `predictions.parquet`: one row per sentence (`correct`: no error span; `label`/`pred`: the entity types present,
  gold and predicted, joined with `+`, or `O`), with its words, gold and predicted tags;
- `spans.parquet`: one row per gold span and per predicted span that is no gold span's match, with its error kind
  (`metrics.tokens.KINDS`) and the features slices read (type, length, position, capitalization, seen in training);
- `hidden_states.npy`: one vector per span (the mean of its words' last hidden states), for `--embedder hidden`.

The slices and clusters stages group the rows of `spans.parquet` (`rundir.readers.read_units`): the failures are
the error spans. See docs/tasks/token-classification.md.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from erroranalysis import rundir
from erroranalysis.core.errors import ModelError, where
from erroranalysis.core.progress import as_reporter
from erroranalysis.core.schemas import SPAN_FEATURES
from erroranalysis.engines import LOCAL, Engine
from erroranalysis.infer.tokens import TokenParams
from erroranalysis.metrics import tokens as tm
from erroranalysis.rundir import Run, create_run
from erroranalysis.sources.table import DataOptions
from erroranalysis.sources.tokens import Sentences, gold_from_spans, gold_surfaces, read_sentences
from erroranalysis.stages.after import AfterParams, after_predictions
from erroranalysis.stages.infer import copy_training_log

TASK = "token-classification"


@dataclass
class TokenJob:
    """A token classifier and its sentences, loaded and checked: what the infer stage needs."""

    model: Path
    clf: object
    sentences: Sentences
    encoded: list
    words: list[list[str]]
    gold: list[list[str]]
    scheme: str
    types: list[str]
    params: TokenParams
    snapped: int = 0
    train_surfaces: set[str] | None = None
    training_state: dict | None = None  # a model in training: the Trainer's state, written as trainer_state.json
    data_opts: DataOptions | None = None  # kept where the workers read the rows (`tokens_ray.scan_head`)

    def manifest(self, **extra) -> dict:
        entry = self.sentences.eval_set.describe()
        meta = [c for c in entry["metadata_columns"]]
        features = [f for f in SPAN_FEATURES if f != "seen_in_train" or self.train_surfaces is not None]
        entry["metadata_columns"] = features + [_meta_name(c) for c in meta]
        entry["sentence_metadata_columns"] = meta
        p = self.params
        return {"task": TASK, "labels": [*self.types, tm.OUTSIDE],
                "model": {**self.clf.describe(), "tags": self.clf.labels, "max_length": p.max_length,
                          "batch_size": p.rows_per_batch},
                "data": entry, "device": self.clf.device,
                "tokens": {"scheme": self.scheme, "types": self.types, "aggregation": p.aggregation,
                           "span_mode": p.span_mode, "input": "text+spans" if self.sentences.raw else "tokens+tags",
                           "snapped_spans": self.snapped}, **extra}


def run_token_classification(model: str | Path, data, out: str | Path, *, data_opts: DataOptions = DataOptions(),
                             token_opts: TokenParams = TokenParams(), after: AfterParams = AfterParams(),
                             train: str | Path | None = None, overwrite: bool = False, progress=None,
                             log: Callable[[str], None] | None = None, engine: Engine = LOCAL) -> Run:
    """Run a token classifier over `data`, write the run at `out`, then metrics, slices and clusters over its
    error spans. `train` (default: the data checks' --train) marks spans whose surface is a gold entity there.
    The data checks (label issues, duplicates) are sentence-classification checks and do not run here. With
    `engine` ray a Parquet, JSONL or CSV eval set is read, checked and predicted by the workers in blocks, each
    writing its shards (`stages.tokens_ray`); other inputs are read here and predicted on Ray actors."""
    if train is None and after.checks is not None:
        train = after.checks.train
    with _worker_rows(data, data_opts, engine, out) as copy, _worker_rows(train, data_opts, engine, out) as train_copy:
        job = prepare_tokens(model, data, data_opts, token_opts, train, engine=engine, rows_path=copy,
                             train_rows=train_copy)
        if after.checks is not None and log:
            log("data checks (label issues, duplicates) do not apply to token classification; skipped")
        after = token_after(after)
        reporter = as_reporter(progress)
        with create_run(out, overwrite=overwrite, **job.manifest(seed=after.seed)) as run:
            token_stage(run, job, reporter, engine)
            after_predictions(run, after, embedder=None, progress=reporter, engine=engine)
    return run


def _worker_rows(data, data_opts: DataOptions, engine: Engine, out):
    """On Ray, a JSONL or CSV eval set (or training file) as a Parquet copy the workers read in blocks
    (`stages.inputs`)."""
    import contextlib

    from erroranalysis.sources import blocks
    from erroranalysis.stages import inputs

    if data is None or not engine.distributed or not inputs.workers_read(data) or blocks.readable(data):
        return contextlib.nullcontext()
    return inputs.worker_rows(data, data_opts, engine, out)


def token_after(after: AfterParams) -> AfterParams:
    """The stages after a token run: no data checks (they are sentence-classification checks), and spans clustered
    by their hidden states in context where MiniLM was asked for."""
    after = after.replace(checks=None)
    if after.cluster is not None and after.cluster.embedder == "minilm":
        after = after.replace(cluster=after.cluster.replace(embedder="hidden"))  # the span in its context
    return after


def prepare_tokens(model: str | Path, data, data_opts: DataOptions, params: TokenParams,
                   train: str | Path | None = None, *, engine: Engine = LOCAL, rows_path=None,
                   train_rows=None) -> TokenJob:
    """Load the checkpoint, read its tag scheme, read and check the sentences and tokenize them (nothing written).
    On Ray with a file the workers read (`rows_path`: a JSONL or CSV file's Parquet copy), only its first rows
    (`tokens_ray.scan_head`); the training file's surfaces from the workers too (`train_rows`: its copy)."""
    from erroranalysis.infer.tokens import load_token_classifier

    params.validate()
    clf = load_token_classifier(model, device=params.device, precision=params.precision,
                                trust_remote_code=params.trust_remote_code)
    from erroranalysis.stages import inputs

    if engine.distributed and inputs.workers_read(data):
        from erroranalysis.stages.tokens_ray import scan_head

        scheme, types = model_scheme(clf, params)
        head = scan_head(data, data_opts, params, clf.labels, types, rows_path)
        job = TokenJob(Path(clf.path), clf, head, [], [], [], scheme, types, params, 0, data_opts=data_opts)
    else:
        job = token_job(clf, data, data_opts, params)
    if train:
        job.train_surfaces = train_surfaces(train, data_opts, params, clf.labels, job.types, job.scheme,
                                            engine=engine, rows_path=train_rows)
    return job


def token_job(clf, data, data_opts: DataOptions, params: TokenParams) -> TokenJob:
    """A TokenJob over a token classifier already loaded (a checkpoint, or a model still in training, as the Trainer
    callback hands it): its tag scheme read, the sentences read, checked and tokenized."""
    scheme, types = model_scheme(clf, params)
    sentences = read_sentences(data, data_opts, params.tokens_column, params.tags_column, params.spans_column,
                               clf.labels, types)
    return sentences_job(clf, sentences, params, scheme, types, None)


def model_scheme(clf, params: TokenParams) -> tuple[str, list[str]]:
    """(tag scheme, entity types) of a token classifier's tags, or the one-line ModelError."""
    model = clf.path
    try:
        scheme = tm.detect_scheme(clf.labels, params.tag_scheme)
    except ValueError as exc:
        raise ModelError(f"{model}: the model's tags ({', '.join(clf.labels[:6])}...): {exc}; pass --tag-scheme "
                         "to match them.") from None
    types = tm.entity_types(clf.labels, scheme)
    if not types:
        raise ModelError(f"{model}: the model's tags {clf.labels} name no entity type besides O; nothing to "
                         "analyze.")
    return scheme, types


def sentences_job(clf, sentences: Sentences, params: TokenParams, scheme: str, types: list[str],
                  surfaces: set[str] | None) -> TokenJob:
    """A TokenJob over sentences already read and checked (the whole eval set, or a block of it on a Ray worker):
    tokenized, raw texts' spans made word tags."""
    from erroranalysis.infer.tokens import encode

    encoded = encode(clf.tokenizer, sentences.texts if sentences.raw else sentences.words, params.max_length)
    words, gold, snapped = sentences.words, sentences.gold, 0
    if sentences.raw:
        words, gold = [], []
        for i, (text, enc, spans) in enumerate(zip(sentences.texts, encoded, sentences.char_spans)):
            tags, cut = gold_from_spans(enc.offsets, spans, scheme,
                                        where(sentences.source, int(sentences.lines[i]), sentences.column))
            words.append([text[s:e] for s, e in enc.offsets])
            gold.append(tags)
            snapped += cut
    return TokenJob(Path(clf.path), clf, sentences, encoded, words, gold, scheme, types, params, snapped, surfaces)


def train_surfaces(train, data_opts: DataOptions, params: TokenParams, labels, types, scheme, *,
                   engine: Engine = LOCAL, rows_path=None) -> set[str]:
    """The surfaces of the training file's gold entities (words and tags in the eval set's columns): read here, or
    on Ray by the workers in blocks (`tokens_ray.worker_surfaces`; `rows_path`: a JSONL or CSV file's copy)."""
    opts = data_opts.replace(id_column=None)
    if engine.distributed:
        from erroranalysis.stages.tokens_ray import worker_surfaces, workers_read_train

        if workers_read_train(train, rows_path):
            return worker_surfaces(train, rows_path, opts, params, labels, types, scheme, engine)
    sentences = read_sentences(train, opts, params.tokens_column, params.tags_column, params.spans_column, labels,
                               types)
    return gold_surfaces(sentences, scheme, params.span_mode)


def token_stage(run: Run, job: TokenJob, progress=None, engine: Engine = LOCAL) -> None:
    """The infer stage: predict every word (in this process, or on Ray actors), classify the spans, commit
    predictions, spans and span vectors."""
    p = job.params
    record = {**p.record(), "device": job.clf.device, "scheme": job.scheme, **engine.record()}
    n = len(job.sentences)
    with run.stage("infer", record) as staging, as_reporter(progress).stage("infer", n) as advance:
        start = time.perf_counter()
        if job.data_opts is not None:  # on Ray, the workers read the rows (`tokens_ray`)
            from erroranalysis.stages.tokens_ray import workers_stage

            workers_stage(staging, job, engine, advance, token_block)
            staging.facts["examples_per_second"] = round(n / max(time.perf_counter() - start, 1e-9), 1)
            copy_training_log(job.model, staging)
            manifest, facts = run.manifest, staging.facts  # counted by the workers: the manifest could not say before
            staging.manifest = {"data": {**manifest["data"], "n_cut": facts["n_cut"]},
                                "tokens": {**manifest["tokens"], "snapped_spans": facts["snapped_spans"]}}
        else:
            _driver_stage(staging, job, engine, advance, start)


def gold_ids(job: TokenJob) -> list[list[int]]:
    """The gold tags as the model's tag ids."""
    index = {name: i for i, name in enumerate(job.clf.labels)}
    return [[index[t] for t in tags] for tags in job.gold]


def token_block(clf, start: int, rows: int, *, source, rows_path, data_opts: DataOptions, params: TokenParams,
                scheme: str, types: list[str], surfaces, sha256: str, sources: dict, paths: dict, ids: str) -> dict:
    """On a Ray worker: rows start..start+rows read, checked, tokenized and predicted as in-process, their rows of
    the three artifacts written as shards `part-<start>` (`tokens_ray.write_table`); their counts back."""
    from erroranalysis.core import files, shards
    from erroranalysis.core.shards import SHARD
    from erroranalysis.infer.tokens import predict
    from erroranalysis.sources import blocks
    from erroranalysis.sources.table import as_source
    from erroranalysis.sources.tokens import block_sentences
    from erroranalysis.stages.tokens_ray import write_table

    file = blocks.parquet_file(as_source(rows_path) if rows_path is not None else as_source(source))
    sentences = block_sentences(source, start, rows, data_opts, params.tokens_column, params.tags_column,
                                params.spans_column, clf.labels, types, sha256=sha256, file=file)
    job = sentences_job(clf, sentences, params, scheme, types, surfaces)
    outs = predict(clf, job.encoded, gold_ids(job), aggregation=params.aggregation, batch_size=params.rows_per_batch)
    preds, spans, vectors = tables(job, outs)
    write_table(paths[rundir.PREDICTIONS], start, preds, file.schema_arrow, sources)
    write_table(paths[rundir.SPANS], start, spans, file.schema_arrow, sources)
    shards.write(paths[rundir.HIDDEN], SHARD.format(start=start, suffix=".npy"), files.npy_writer(vectors))
    frame = sentences.eval_set.frame
    if data_opts.id_column:
        blocks.write_id_parts(ids, start, frame["example_id"], frame["_line"])
    return {"rows": rows, "n_error_spans": int((~spans["correct"]).sum()),
            "truncated_sentences": int(preds["truncated"].sum()), "n_cut": int(frame["_cut"].sum()),
            "snapped_spans": job.snapped}


def _driver_stage(staging, job: TokenJob, engine: Engine, advance, start: float) -> None:
    """The infer stage's body with the sentences read here: predicted here or on Ray actors, the tables built
    here."""
    from erroranalysis.infer.tokens import predict

    p, n, gold = job.params, len(job.sentences), gold_ids(job)
    if engine.distributed:
        from erroranalysis.engines.ray_tokens import predict_tokens

        outs = predict_tokens(job.model, job.encoded, gold, aggregation=p.aggregation,
                              batch_size=p.rows_per_batch, engine=engine, progress=advance,
                              load_kwargs={"device": p.device, "precision": p.precision,
                                           "trust_remote_code": p.trust_remote_code})
    else:
        outs = predict(job.clf, job.encoded, gold, aggregation=p.aggregation, batch_size=p.rows_per_batch,
                       progress=advance)
    staging.facts["examples_per_second"] = round(n / max(time.perf_counter() - start, 1e-9), 1)
    preds, spans, vectors = tables(job, outs)
    staging.facts["n_error_spans"] = int((~spans["correct"]).sum())
    staging.facts["truncated_sentences"] = int(preds["truncated"].sum())
    staging.write_parquet(rundir.PREDICTIONS, preds)
    staging.write_parquet(rundir.SPANS, spans)
    staging.write_npy(rundir.HIDDEN, vectors)
    if job.training_state is not None:
        staging.write_json(rundir.TRAINER_STATE, job.training_state)
    else:
        copy_training_log(job.model, staging)


def tables(job: TokenJob, outs: list[dict]):
    """(predictions, spans, span vectors) from the per-sentence outputs of `infer.tokens.predict`."""
    import pandas as pd

    frame = job.sentences.eval_set.frame
    ids = frame["example_id"].astype(str).to_numpy()
    meta = job.sentences.eval_set.metadata_columns
    sentence_rows, span_rows, vectors = [], [], []
    for i, out in enumerate(outs):
        words, gold = job.words[i], job.gold[i]
        pred = [job.clf.labels[k] for k in out["pred"]]
        g_spans = tm.spans_of(gold, job.scheme, job.params.span_mode)
        p_spans = tm.spans_of(pred, job.scheme, job.params.span_mode)
        records = tm.classify_spans(g_spans, p_spans)
        kinds = [r["kind"] for r in records]
        errors = [k for k in kinds if k != "correct"]
        offsets = job.encoded[i].offsets
        sentence_rows.append({
            "example_id": ids[i], "text": job.sentences.texts[i] if job.sentences.raw else " ".join(words),
            "label": _types_of(g_spans), "pred": _types_of(p_spans), "correct": not errors,
            "confidence": _stat(np.nanmin, out["confidence"]), "loss": _stat(np.nanmean, out["loss"]),
            "n_tokens": len(job.encoded[i].ids) or len(words),  # words when the tags came without a model
            "truncated": bool(job.encoded[i].truncated or frame["_cut"].iat[i]),
            "tokens": list(words), "gold_tags": gold, "pred_tags": pred,
            "word_confidence": [float(c) for c in out["confidence"]], "n_words": len(words),
            "n_gold_spans": len(g_spans), "n_pred_spans": len(p_spans), "n_error_spans": len(errors),
            "error_kinds": sorted(set(errors)), "char_offsets": [list(o) for o in offsets] if offsets else None})
        for k, r in enumerate(records):
            span_rows.append(_span_row(job, i, ids[i], k, r, words, out, offsets))
            vectors.append(out["vectors"][r["start"]:r["end"]].mean(0))
    preds = pd.DataFrame(sentence_rows)
    spans = span_frame(span_rows, _span_columns(job))
    row_of = {sid: r for r, sid in enumerate(ids)}
    rows = np.array([row_of[s] for s in spans["sentence_id"]], dtype=np.int64)
    for column in meta:  # the sentence's own columns, on the sentence and on each of its spans
        values = frame[column].to_numpy()
        preds[_meta_name(column)] = values
        spans[_meta_name(column)] = values[rows]
    width = outs[0]["vectors"].shape[1] if outs else 0
    matrix = np.asarray(vectors, dtype=np.float32).reshape(len(vectors), width)
    return preds, spans, matrix


def _stat(function, values) -> float:
    """`function` (nanmin, nanmean) of the finite values, NaN when there are none (no model, or past the cut)."""
    values = np.asarray(values, dtype=np.float64)
    return float(function(values)) if np.isfinite(values).any() else float("nan")


def _types_of(spans) -> str:
    return "+".join(sorted({t for _, _, t in spans})) or tm.OUTSIDE


def _span_columns(job: TokenJob) -> list[str]:
    from erroranalysis.core.schemas import SPANS

    return [c for c in SPANS.columns if c != "seen_in_train" or job.train_surfaces is not None]


def span_frame(rows: list[dict], columns: list[str]):
    """Span rows as a frame of spans.parquet's types, also without a row: on Ray a block with no span writes a shard
    of the folder's types (a reader takes a folder's schema from its first shard)."""
    import pandas as pd

    from erroranalysis.core.schemas import SPANS

    frame = pd.DataFrame(rows, columns=columns)
    return frame.astype({c: t for c, t in SPANS.dtypes.items() if c in frame.columns})


def _span_row(job: TokenJob, i: int, sentence_id: str, k: int, r: dict, words, out, offsets) -> dict:
    s, e = r["start"], r["end"]
    raw = job.sentences.raw
    char_start, char_end = (offsets[s][0], offsets[e - 1][1]) if raw else (-1, -1)
    surface = job.sentences.texts[i][char_start:char_end] if raw else " ".join(words[s:e])
    context = " ".join([*words[:s], "[[", *words[s:e], "]]", *words[e:]])
    seen = out["seen"][s:e]
    row = {"example_id": f"{sentence_id}#{k}", "text": surface, "label": r["gold_type"] or tm.OUTSIDE,
           "pred": r["pred_type"] or tm.OUTSIDE, "correct": r["kind"] == "correct",
           "confidence": _stat(np.nanmean, out["confidence"][s:e]), "loss": _stat(np.nanmean, out["loss"][s:e]),
           "n_tokens": e - s, "truncated": not bool(seen.all()), "sentence_id": sentence_id,
           "char_start": char_start, "char_end": char_end, "context": context,
           **{key: r[key] for key in ("source", "kind", "start", "end", "gold_type", "pred_type", "match_start",
                                      "match_end")},
           "entity_type": r["gold_type"] or r["pred_type"], "span_length": e - s,
           "position": "first" if s == 0 else ("last" if e == len(words) else "inside"),
           "prev_word": words[s - 1].lower() if s > 0 else "<start>",  # the context a type error often hangs on
           "capitalization": tm.capitalization(surface)}
    if job.train_surfaces is not None:
        row["seen_in_train"] = "seen" if surface in job.train_surfaces else "unseen"
    return row


def _meta_name(column: str) -> str:
    from erroranalysis.core.schemas import SPANS, TOKEN_PREDICTION_COLUMNS

    return f"meta_{column}" if column in SPANS.columns or column in TOKEN_PREDICTION_COLUMNS else column

