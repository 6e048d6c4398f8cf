"""The slice search's and the feature extraction's parameters, each declared once (`erroranalysis.core.params`)."""

from __future__ import annotations

from dataclasses import dataclass

from erroranalysis.core.params import Choice, Flag, Float, Int, Params, param
from erroranalysis.slices._merge import CONCEPT_THRESHOLD
from erroranalysis.slices._stats import CORRECTIONS


@dataclass(frozen=True)
class SearchParams(Params):
    """How `find_slices` searches, tests, merges and prunes (its docstring says what each does)."""

    min_support: int | None = param(None, Int(1), "Smallest slice, in examples.",
                                    none="10, or 0.1% of the examples if more")
    max_order: int = param(3, Choice(1, 2, 3), "Features per slice: 1 single features, 2 or 3 add their "
                           "conjunctions.")
    alpha: float = param(0.95, Float(0, 1, low_open=True), "SliceLine's weight of error rate against slice size.",
                         flag="--slice-alpha")
    top_k: int = param(20, Int(1), "Report at most this many slices.", flag="--max-slices")
    max_candidates: int = param(100, Int(2), "Singles (and pairs) extended into conjunctions.", advanced=True)
    correction: str = param("holm", Choice(*CORRECTIONS), "Multiple-testing correction over every slice tried.",
                            advanced=True)
    level: float = param(0.05, Float(0, 1, low_open=True, high_open=True), "Significance level of a slice, "
                         "after the correction.", flag="--slice-level")
    merge: bool = param(True, Flag(), "Merge near-synonymous word slices (the packaged word-embedding model).")
    merge_threshold: float = param(0.4, Float(-1, 1), "Mean cosine of a word to a group's words to join it.",
                                   advanced=True)
    concept_threshold: float = param(CONCEPT_THRESHOLD, Float(-1, 1), "Median cosine between two halves of a "
                                     "merged group that each stand out alone, to stay one slice.", advanced=True)
    merge_level: float = param(0.01, Float(0, 1, low_open=True, high_open=True), "Uncorrected p-value at which a "
                               "word is considered for merging.", advanced=True)
    max_merge_words: int = param(200, Int(2), "Words considered for merging, at most.", advanced=True)
    max_overlap: float = param(0.8, Float(0, 1, low_open=True), "A slice mostly (this share) inside a better one "
                               "is pruned unless significantly more erroneous.", advanced=True)
    min_score: float | None = param(None, Float(), "Also require this SliceLine score (0, as SliceLine).",
                                    none="no score required", advanced=True)


@dataclass(frozen=True)
class FeatureParams(Params):
    """Which interpretable features `extract_features` builds."""

    ngram_max: int = param(2, Choice(1, 2, 3), "Longest word phrase used as a feature.")
    n_buckets: int = param(5, Int(2, 20), "Quantile buckets of numeric metadata and text length.")
    max_categories: int = param(10, Int(1), "Values of a categorical metadata column kept as features.",
                                advanced=True)
