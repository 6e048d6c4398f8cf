"""Every session-state key the app uses, declared once. Pages read and write state only through these names."""

from __future__ import annotations

from typing import Any

import streamlit as st

# App
CONFIG = "ea_config"             # the AppConfig the session started with (eaui.config)

# Sidebar
RUN = "run"                      # the current run's key (mirrored in the ?run= query parameter)
PENDING_RUN = "ea_pending_run"   # a run picked on the Runs page, applied to the sidebar picker on the next rerun
USER = "ea_user"                 # the name typed in "Labeling as" (local mode only: eaui.identity)
IDENTITY = "ea_identity"         # this session's eaui.identity.Identity, set by app.py on every script run

# Confusion matrix page
CM_MODE = "ea_cm_mode"           # "Counts" or "Normalized"
CM_CHART = "ea_cm_chart"         # the heatmap's selection event
CM_PAIR = "ea_cm_pair"           # the selected (true, predicted) pair, as "label\tpred"
CM_SEARCH = "ea_cm_search"

# Runs page
RUNS_TABLE = "ea_runs_table"
RUNS_TABLE_SEEN = "ea_runs_table_seen"

# Overview page
SLICE_COLUMN = "ea_slice_column"

# Clusters page
CLUSTER = "ea_cluster"           # the cluster shown in detail (cluster id)
CLUSTER_LIST = "ea_cluster_list"  # the cluster list's row selection
CLUSTER_LIST_SEEN = "ea_cluster_list_seen"  # the list selection last applied (a new one opens its cluster)
MAP_CHART = "ea_map_chart"       # the 2-D map's selection event
MAP_SELECTION = "ea_map_selection"  # example ids picked on the map (list of str)
MAP_SEEN = "ea_map_seen"             # the map selection last applied
MAP_SHOW_CORRECT = "ea_map_show_correct"
CLUSTER_SEARCH = "ea_cluster_search"
CLUSTER_LABELS = "ea_cluster_labels"
CLUSTER_PREDS = "ea_cluster_preds"

# Label page
LABEL_SOURCE = "ea_label_source"     # where the examples to label come from
LABEL_CLUSTER = "ea_label_cluster"
LABEL_FAMILY = "ea_label_family"     # the parent cluster whose clusters are labeled together
LABEL_PAIR = "ea_label_pair"
LABEL_FROM_TYPE = "ea_label_from_type"
LABEL_SEARCH = "ea_label_search"
LABEL_TABLE = "ea_label_table"       # prefix of the examples table key (a nonce is appended after each change)
LABEL_NONCE = "ea_label_nonce"
LABEL_ROWS = "ea_label_rows"         # example ids of the table as rendered, so callbacks map rows to ids
LABEL_TARGET = "ea_label_target"     # error type to assign to
LABEL_NOTE = "ea_label_note"
LABEL_NOTE_FOR = "ea_label_note_for"  # the example whose note the note box holds
MERGE_CLUSTERS = "ea_merge_clusters"
MERGE_TARGET = "ea_merge_target"
NEW_TYPE_NAME = "ea_new_type_name"
NEW_TYPE_DEFINITION = "ea_new_type_definition"
NEW_TYPE_SEVERITY = "ea_new_type_severity"
EDIT_TYPE = "ea_edit_type"
EDIT_NAME = "ea_edit_name"
EDIT_DEFINITION = "ea_edit_definition"
EDIT_SEVERITY = "ea_edit_severity"
MERGE_TYPES = "ea_merge_types"
MERGE_TYPES_BUTTON = "ea_merge_types_button"
MERGE_CLUSTERS_BUTTON = "ea_merge_clusters_button"
NEW_TYPE_FORM = "ea_new_type_form"

# Taxonomy page
TAXONOMY_TYPE = "ea_taxonomy_type"
DOWNLOAD = "ea_download_"        # + json / csv / markdown

# Compare page
CMP_BASE = "ea_cmp_base"             # the baseline run key
CMP_CANDIDATES = "ea_cmp_candidates"  # candidate run keys (list)
CMP_DETAIL = "ea_cmp_detail"         # the candidate whose comparison is shown in detail
CMP_STATUS = "ea_cmp_status"         # Fixed / Broken / Still failing
CMP_SEARCH = "ea_cmp_search"

# Review page (suggested labels)
REVIEW_TABLE = "ea_review_table"     # prefix of the suggestions table key (a nonce is appended after each change)
REVIEW_NONCE = "ea_review_nonce"
REVIEW_ROWS = "ea_review_rows"       # example ids of the table as rendered
REVIEW_TYPE = "ea_review_type"       # filter: one suggested error type, or all
REVIEW_SOURCE = "ea_review_source"   # where the taxonomy to apply comes from
REVIEW_FROM_RUN = "ea_review_from_run"
REVIEW_UPLOAD = "ea_review_upload"
REVIEW_METHOD = "ea_review_method"
REVIEW_AUTO = "ea_review_auto"       # calibrate the threshold (else REVIEW_THRESHOLD)
REVIEW_THRESHOLD = "ea_review_threshold"
REVIEW_CONFUSIONS = "ea_review_confusions"  # hold one-confusion types to their confusion

CMP_STATUSES = ("Fixed", "Broken", "Still failing")
REVIEW_SOURCES = ("Another run in this workspace", "A taxonomy file")

# Slices page
SLICE = "ea_slice"                   # the slice shown in detail (slice id)
SLICE_LIST = "ea_slice_list"         # the ranked list's row selection
SLICE_LIST_SEEN = "ea_slice_list_seen"  # the list selection last applied (a new one opens its slice)
SLICE_SEARCH = "ea_slice_search"
SLICE_SHOW_CORRECT = "ea_slice_show_correct"  # list the slice's correct members too
SLICE_OVERWRITE = "ea_slice_overwrite"  # "make an error type" also moves failures that already have one

# Training page
TRAINING_LOG = "ea_training_log"     # a log path typed by the user (empty: the checkpoint folder's log)

# Training data page (sft-check runs)
SFT_KIND = "ea_sft_kind"             # the finding kind whose rows are listed ("" for every row)
SFT_PAGE = "ea_sft_page"             # the page of rows shown (1-based)

# Messages carried over a rerun: list of (kind, text), kind in success/info/warning/error
FLASH = "ea_flash"

LABEL_SOURCES = ("Cluster", "Cluster family", "Confusion", "Map selection", "Error type", "Unlabeled failures",
                 "All failures")
NEW_TYPE_PARENT = "ea_new_type_parent"  # the parent of a new error type (None: top level)
EDIT_PARENT = "ea_edit_parent"


def get(key: str, default: Any = None) -> Any:
    return st.session_state.get(key, default)


def put(key: str, value: Any) -> None:
    st.session_state[key] = value


def flash(kind: str, text: str) -> None:
    """Queue a message to show at the top of the next render (actions run in callbacks, before the rerun)."""
    st.session_state.setdefault(FLASH, []).append((kind, text))


def pop_flash() -> list[tuple[str, str]]:
    return st.session_state.pop(FLASH, [])


def label_table_key() -> str:
    return f"{LABEL_TABLE}_{st.session_state.get(LABEL_NONCE, 0)}"


def reset_label_selection() -> None:
    """A fresh examples table (no rows selected) after a change, so a selection never points at stale rows."""
    st.session_state[LABEL_NONCE] = st.session_state.get(LABEL_NONCE, 0) + 1


def pair_key(label: str, pred: str) -> str:
    return f"{label}\t{pred}"


def split_pair(value: str | None) -> tuple[str, str] | None:
    if not value or "\t" not in value:
        return None
    label, pred = value.split("\t", 1)
    return label, pred


def review_table_key() -> str:
    return f"{REVIEW_TABLE}_{st.session_state.get(REVIEW_NONCE, 0)}"


def reset_review_selection() -> None:
    st.session_state[REVIEW_NONCE] = st.session_state.get(REVIEW_NONCE, 0) + 1
