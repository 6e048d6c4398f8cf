"""`erroranalysis analyze --task token-classification`: tags predicted elsewhere (spaCy, Flair, an API, another
framework) analyzed as `run` analyzes a token classifier: the same predictions.parquet, spans.parquet, metrics,
slices and clusters, without a model (so no probabilities, losses or span vectors: the clusters embed the spans
with the default embedder).

The eval set holds words (`--tokens-column`), gold tags (`--tags-column`) and predicted tags (`--pred-column`,
default `pred_tags`), names in one scheme; the tag set is what the two columns use.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np

from erroranalysis import rundir
from erroranalysis.core.errors import DataError, preview
from erroranalysis.core.progress import as_reporter
from erroranalysis.infer.tokens import Encoded, TokenParams
from erroranalysis.metrics import tokens as tm
from erroranalysis.rundir import Run, create_run
from erroranalysis.sources.table import DataOptions, as_source, read_table
from erroranalysis.sources.tokens import read_sentences
from erroranalysis.stages.after import AfterParams, after_predictions
from erroranalysis.stages.tokens import TokenJob, tables, train_surfaces

PRED_COLUMN = "pred_tags"


def analyze_token_predictions(data, out: str | Path, *, data_opts: DataOptions = DataOptions(),
                              token_opts: TokenParams = TokenParams(), pred_column: str = PRED_COLUMN,
                              after: AfterParams = AfterParams(), train: str | Path | None = None,
                              overwrite: bool = False, progress=None, log=None) -> Run:
    """Analyze predicted tags made elsewhere; see the module's docstring."""
    if train is None and after.checks is not None:
        train = after.checks.train
    job, pred = prepare(data, data_opts, token_opts, pred_column, train)
    if after.checks is not None and log:
        log("data checks (label issues, duplicates) do not apply to token classification; skipped")
    after = after.replace(checks=None)
    manifest = {**job.manifest(seed=after.seed), "model": None, "device": None}
    manifest["tokens"]["input"] = "tokens+tags+predicted tags"
    with create_run(out, overwrite=overwrite, **manifest) as run:
        index = {name: i for i, name in enumerate(job.clf.labels)}
        outs = []
        for words, tags in zip(job.words, pred):
            n = len(words)
            outs.append({"pred": np.array([index[t] for t in tags], dtype=np.int64),
                         "confidence": np.full(n, np.nan, np.float32), "loss": np.full(n, np.nan, np.float32),
                         "vectors": np.zeros((n, 0), np.float32), "seen": np.ones(n, dtype=bool)})
        with run.stage("load_predictions", {"pred_column": pred_column, **token_opts.record()}) as staging:
            preds, spans, _ = tables(job, outs)
            staging.facts["n_error_spans"] = int((~spans["correct"]).sum())
            staging.write_parquet(rundir.PREDICTIONS, preds)
            staging.write_parquet(rundir.SPANS, spans)
        after_predictions(run, after, progress=as_reporter(progress))
    return run


def prepare(data, data_opts: DataOptions, params: TokenParams, pred_column: str, train) -> tuple[TokenJob, list]:
    """The sentences, gold and predicted tags checked against the tag set they use (nothing written)."""
    path = as_source(data)
    frame, _ = read_table(path, encoding=data_opts.encoding, split=data_opts.split)
    missing = [c for c in (params.tokens_column, params.tags_column, pred_column) if c not in frame.columns]
    if missing:
        raise DataError(f"{path}: no column {missing[0]!r}; columns found: "
                        f"{preview(c for c in frame.columns if c != '_line')}; analyze reads words "
                        "(--tokens-column), gold tags (--tags-column) and predicted tags (--pred-column).")
    labels = tag_set(frame, (params.tags_column, pred_column), str(path))
    try:
        scheme = tm.detect_scheme(labels, params.tag_scheme)
    except ValueError as exc:
        raise DataError(f"{path}: the tags ({', '.join(labels[:6])}...): {exc}; pass --tag-scheme to match them.") \
            from None
    types = tm.entity_types(labels, scheme)
    gold = read_sentences(data, data_opts, params.tokens_column, params.tags_column, "", labels, types)
    pred = read_sentences(data, data_opts, params.tokens_column, pred_column, "", labels, types)
    clf = SimpleNamespace(labels=labels, device=None, describe=dict)
    encoded = [Encoded(ids=[], word_positions=[[k] for k in range(len(w))], offsets=None, truncated=False)
               for w in gold.words]
    surfaces = train_surfaces(train, data_opts, params, labels, types, scheme) if train else None
    job = TokenJob(Path(str(path)), clf, gold, encoded, gold.words, gold.gold, scheme, types, params, 0, surfaces)
    return job, pred.gold


def tag_set(frame, columns, source: str) -> list[str]:
    """The tag names the columns use, O first; ids are refused (without a model nothing maps them to names)."""
    names = set()
    for column in columns:
        for line, cell in zip(frame["_line"], frame[column]):
            values = cell.tolist() if hasattr(cell, "tolist") else cell
            for tag in values if isinstance(values, list) else []:
                if not isinstance(tag, str):
                    raise DataError(f"{source}, line {int(line)}, column {column!r}: tag {tag!r} is not a name; "
                                    "without a model, tags are given by name (B-PER, O).")
                names.add(tag)
    return [tm.OUTSIDE, *sorted(names - {tm.OUTSIDE})]
