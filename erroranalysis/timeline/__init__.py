"""Error types across a training run: match each step's failure clusters to the earlier steps', and say what
happened, in words, beside the training signals of the same steps.

Pure (`tracking`: identities across steps; `events`: what happened, in words): functions over sets of example
ids, centroid vectors and training-log series; `erroranalysis.stages` (`build_timeline`) reads the step runs and
calls them.

    states = [StepState(step=500, failing={...}, clusters={0: {...}}, centroids={0: vec}, ...), ...]
    types = track(states)                              # one ErrorType per identity, with its size at each step
    events = describe(types, states, signals, findings)  # "... appeared at step 500 and grew until ..."

Two clusters of consecutive steps are the same error type when

- their members that fail at both steps overlap (Jaccard >= `min_overlap`): a type that shrank because most of it
  was fixed still matches what is left of it (the rule `compare.match_clusters` uses for two runs);
- or their centroids (mean embedding of their failures, the same embedder at both steps) reach cosine similarity
  `min_similarity`: the same kind of failure on other examples;
- or the labeled taxonomy gives both the same error type (most of their failures labeled or suggested with it).

Pairs are chosen one to one, maximising overlap + similarity (+1 for the same label). A cluster left unmatched is
matched, by the same rules, against the types seen earlier but absent at the previous step ("came back"), and
else is a new type; a type with no cluster at a step is absent there (fixed, when most of its failures are now
right). Splits and merges keep the larger part's identity; the other part is new or gone. A step without clusters
(too few failures, or none dense enough) observes no type: it neither ends nor starts one.
"""

from __future__ import annotations

from erroranalysis.timeline.events import Event, Landmark, describe, landmarks
from erroranalysis.timeline.tracking import (
    LABEL_SHARE,
    MIN_OVERLAP,
    MIN_SIMILARITY,
    STEP_DIGITS,
    ErrorType,
    StepState,
    TrackParams,
    centroid,
    checkpoint_step,
    link,
    majority_label,
    step_name,
    step_of,
    track,
)

__all__ = ["LABEL_SHARE", "MIN_OVERLAP", "MIN_SIMILARITY", "STEP_DIGITS", "ErrorType", "Event", "Landmark",
           "StepState", "TrackParams", "centroid", "checkpoint_step", "describe", "landmarks", "link", "majority_label", "step_name",
           "step_of", "track"]
