"""The names of a run directory's files, and the columns predictions always have.
"""

from __future__ import annotations

MANIFEST = "manifest.json"
PREDICTIONS = "predictions.parquet"
PROBS = "probs.npy"
HIDDEN = "hidden_states.npy"
METRICS = "metrics.json"
EMBEDDINGS = "embeddings.npy"
EMBEDDINGS_META = "embeddings.json"
CLUSTERS = "clusters.parquet"
ASSIGNMENTS = "assignments.parquet"
SLICES = "slices.parquet"
SLICE_MEMBERS = "slice_members.parquet"


# Columns predictions.parquet always has; any other column is eval-set metadata.
CORE_COLUMNS = ("example_id", "text", "label", "pred", "correct", "confidence", "loss", "n_tokens", "truncated")
