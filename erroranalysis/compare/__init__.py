"""Compare runs of the same eval set: a baseline and one or more candidates (an ablation series).

The statistics are pure functions over arrays (`stats`, `pairs`): `paired_bootstrap` (paired percentile intervals
for the change of accuracy, macro/weighted F1 and per-class precision, recall and F1), `mcnemar` (paired
correctness, exact binomial when the discordant count is small), `match_clusters` (clusters matched across runs
by shared members); `gate.regressions` is the `--fail-on-regression` gate and `series` the ablation table. The
thin layer on top (`erroranalysis.stages`) reads the run directories and the labels store and builds one report:

    from erroranalysis import stages
    from erroranalysis.report import compare_markdown
    report = stages.compare_runs("runs/base", ["runs/cand"])       # examples matched by example id
    stages.write_report(report, "out/")                             # compare.json, compare.md, compare_examples.parquet
    print(compare_markdown.to_markdown(report.doc))

The JSON format (`format: erroranalysis.compare`, `schema_version: 1`) is documented in docs/compare.md.
"""

from __future__ import annotations

from erroranalysis.compare.gate import GATE_ALPHA, GATED_OVERALL, regressions
from erroranalysis.compare.pairs import (
    FORMAT,
    MIN_OVERLAP,
    OVERALL,
    SCHEMA_VERSION,
    STATUSES,
    TEXT_LIMIT,
    RunView,
    align,
    compare_pair,
    labels_union,
    match_clusters,
)
from erroranalysis.compare.params import CompareParams
from erroranalysis.compare.series import REPORT_FILES, Report, format_cell, series, series_frame, to_json
from erroranalysis.compare.stats import (
    BOOTSTRAP_CELLS,
    EXACT_BELOW,
    LEVEL,
    PER_CLASS,
    finite,
    mcnemar,
    paired_bootstrap,
    stats_from_confusion,
    worse_p,
)

__all__ = ["BOOTSTRAP_CELLS", "CompareParams", "EXACT_BELOW", "FORMAT", "GATED_OVERALL", "GATE_ALPHA", "LEVEL", "MIN_OVERLAP",
           "OVERALL", "PER_CLASS", "REPORT_FILES", "SCHEMA_VERSION", "STATUSES", "TEXT_LIMIT", "Report", "RunView",
           "align", "compare_pair", "finite", "format_cell", "labels_union", "match_clusters", "mcnemar",
           "paired_bootstrap", "regressions", "series", "series_frame", "stats_from_confusion", "to_json", "worse_p"]
