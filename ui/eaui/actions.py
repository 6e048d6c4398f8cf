"""Button callbacks of the Label page. Each one reads the widgets' values from session state, makes one call to the
labels store (one transaction, one logged event) and queues a message for the next render. A refused change (a
UserError) becomes an error message; nothing is half-done."""

from __future__ import annotations

from collections.abc import Callable

import streamlit as st

from erroranalysis.core.errors import UserError
from erroranalysis_ui.eaui import components as ui
from erroranalysis_ui.eaui import state


def _run(action: Callable[[], str | None]) -> None:
    try:
        with ui.config().workspace.confined():  # callbacks run before the page, outside app.py's confinement
            message = action()
    except UserError as exc:
        state.flash("error", str(exc).splitlines()[0])
        return
    if message:
        state.flash("success", message)


def _selected_ids() -> list[str]:
    """Example ids of the rows selected in the Label page's table, as it was rendered."""
    event = st.session_state.get(state.label_table_key()) or {}
    rows = (event.get("selection") or {}).get("rows") or []
    shown = st.session_state.get(state.LABEL_ROWS) or []
    return [shown[i][0] for i in rows if 0 <= i < len(shown)]


def _clusters_of(ids: list[str]) -> dict[str, int]:
    shown = dict(st.session_state.get(state.LABEL_ROWS) or [])
    return {i: shown[i] for i in ids if i in shown and shown[i] is not None and shown[i] >= 0}


def _done(change) -> str:
    state.reset_label_selection()
    return change.summary[:1].upper() + change.summary[1:] + "." if change.changed else "Nothing changed."


def create_type() -> None:
    def act() -> str:
        name = st.session_state.get(state.NEW_TYPE_NAME, "")
        created = ui.open_labels().create_error_type(name, st.session_state.get(state.NEW_TYPE_DEFINITION, ""),
                                                st.session_state.get(state.NEW_TYPE_SEVERITY) or "medium",
                                                parent=st.session_state.get(state.NEW_TYPE_PARENT))
        st.session_state[state.LABEL_TARGET] = created.id
        return f"Created error type “{created.name}”."

    _run(act)


def assign_selected(run_key: str) -> None:
    def act() -> str:
        ids = _selected_ids()
        if not ids:
            raise UserError("select examples in the table first (tick the boxes on the left).")
        target = _target()
        return _done(ui.open_labels().assign(run_key, ids, target, cluster_ids=_clusters_of(ids)))

    _run(act)


def assign_ids(run_key: str, ids: list[str], clusters: dict[str, int], summary: str | None = None) -> None:
    def act() -> str:
        if not ids:
            raise UserError("there are no examples to assign here.")
        target = _target()
        name = ui.open_labels().error_type(target).name
        text = summary.replace("{type}", repr(name)) if summary else None
        return _done(ui.open_labels().assign(run_key, ids, target, cluster_ids=clusters, summary=text))

    _run(act)


def assign_rows(run_key: str, table, at, summary: str | None = None) -> None:
    """assign_ids for the rows of `table` at positions `at` (with their clusters), read when clicked: a page passes
    the positions of every matching row without building 200,000 ids on each rerun."""
    ids = table["example_id"].iloc[at].tolist()
    clusters = table["cluster_id"].iloc[at].astype(int).tolist()
    # unclustered examples (-1) get no cluster, as assign_selected records them
    assign_ids(run_key, ids, {i: c for i, c in zip(ids, clusters) if c >= 0}, summary)


def unassign_selected(run_key: str) -> None:
    def act() -> str:
        ids = _selected_ids()
        if not ids:
            raise UserError("select the examples to move out first.")
        return _done(ui.open_labels().unassign(run_key, ids, summary=f"moved {len(ids)} examples out of their error type"))

    _run(act)


def flag_selected(run_key: str, flag: str, value: bool = True) -> None:
    def act() -> str:
        ids = _selected_ids()
        if not ids:
            raise UserError("select examples in the table first.")
        return _done(ui.open_labels().set_flag(run_key, ids, flag, value))

    _run(act)


def save_note(run_key: str, example_id: str) -> None:
    def act() -> str:
        change = ui.open_labels().set_note(run_key, example_id, st.session_state.get(state.LABEL_NOTE, ""))
        return _done(change)

    _run(act)


def merge_clusters(run_key: str, members: dict[int, list[tuple[str, int]]]) -> None:
    def act() -> str:
        picked = [int(c) for c in st.session_state.get(state.MERGE_CLUSTERS) or []]
        if not picked:
            raise UserError("pick the clusters to merge first.")
        target = st.session_state.get(state.MERGE_TARGET)
        if target is None:
            raise UserError("pick the error type to merge the clusters into (create one first).")
        pairs = [p for c in picked for p in members.get(c, [])]
        ids = [i for i, _ in pairs]
        name = ui.open_labels().error_type(int(target)).name
        summary = (f"merged clusters {', '.join('#' + str(c) for c in picked)} into {name!r} "
                   f"({len(ids)} examples)")
        change = ui.open_labels().assign(run_key, ids, int(target), cluster_ids=dict(pairs), summary=summary)
        st.session_state[state.MERGE_CLUSTERS] = []
        return _done(change)

    _run(act)


def undo() -> None:
    _run(lambda: _done(ui.open_labels().undo()))


def update_type() -> None:
    def act() -> str:
        type_id = st.session_state.get(state.EDIT_TYPE)
        if type_id is None:
            raise UserError("pick the error type to edit.")
        updated = ui.open_labels().update_error_type(int(type_id), name=st.session_state.get(state.EDIT_NAME),
                                                definition=st.session_state.get(state.EDIT_DEFINITION),
                                                severity=st.session_state.get(state.EDIT_SEVERITY),
                                                parent=st.session_state.get(state.EDIT_PARENT))
        return f"Saved “{updated.name}”."

    _run(act)


def merge_types() -> None:
    def act() -> str:
        type_id = st.session_state.get(state.EDIT_TYPE)
        sources = st.session_state.get(state.MERGE_TYPES) or []
        if type_id is None or not sources:
            raise UserError("pick the error types to merge into this one.")
        change = ui.open_labels().merge_error_types([int(s) for s in sources], int(type_id))
        st.session_state[state.MERGE_TYPES] = []
        return _done(change)

    _run(act)


def delete_type() -> None:
    def act() -> str:
        type_id = st.session_state.get(state.EDIT_TYPE)
        if type_id is None:
            raise UserError("pick the error type to delete.")
        change = ui.open_labels().delete_error_type(int(type_id))
        st.session_state.pop(state.EDIT_TYPE, None)
        return change.summary[:1].upper() + change.summary[1:] + ". Undo brings it back."

    _run(act)


def _target() -> int:
    target = st.session_state.get(state.LABEL_TARGET)
    if target is None:
        raise UserError("pick an error type to assign to, or create one under Error types.")
    return int(target)


# -- Review page (suggested labels) ----------------------------------------------------------------------------


def _review_selected_ids() -> list[str]:
    event = st.session_state.get(state.review_table_key()) or {}
    rows = (event.get("selection") or {}).get("rows") or []
    shown = st.session_state.get(state.REVIEW_ROWS) or []
    return [shown[i] for i in rows if 0 <= i < len(shown)]


def review_selected(run_key: str, accept: bool) -> None:
    """Accept (they become labels) or reject the suggestions selected in the Review table."""
    from erroranalysis.stages import review

    def act() -> str:
        ids = _review_selected_ids()
        if not ids:
            raise UserError("select suggestions in the table first (tick the boxes on the left).")
        change = review(ui.open_labels(), run_key, ids, accept)
        state.reset_review_selection()
        return _done(change)

    _run(act)


def review_ids(run_key: str, ids: list[str], accept: bool) -> None:
    """Accept or reject every suggestion listed (all of the pending type picked, not only the rows shown)."""
    from erroranalysis.stages import review

    def act() -> str:
        change = review(ui.open_labels(), run_key, ids, accept)
        state.reset_review_selection()
        return _done(change)

    _run(act)


def suggest_types(run_path, origin, *, method: str, threshold: float | None, confusions: bool) -> None:
    """Apply a labeled taxonomy to the run (erroranalysis.stages.apply_taxonomy): `origin` is another run of the
    workspace (its key), whose taxonomy is built from its labels, or an uploaded taxonomy JSON export."""
    from erroranalysis import stages
    from erroranalysis.labels import taxonomy

    def act() -> str:
        store, workspace = ui.open_labels(), ui.config().workspace
        if isinstance(origin, str):
            name = f"run {origin}"
            doc = stages.build_taxonomy(workspace.open_run(workspace.run_dir(origin)), store)
        else:
            name = origin.name
            doc = taxonomy.loads(origin.getvalue(), name)
        result = stages.apply_taxonomy(doc, run_path, store=store, method=method, threshold=threshold, name=name,
                                       confusions=confusions)
        state.reset_review_selection()
        return (f"Suggested an error type for {result.n_suggested:,} of {result.n_failures:,} failures; "
                f"{result.n_unmatched:,} new/unmatched (distance > {result.threshold:.2f}).")

    _run(act)


# -- Slices page ---------------------------------------------------------------------------------------------------


def slice_type_name(description: str) -> str:
    """The error type name made from a slice's description: the description itself, cut to the store's limit."""
    from erroranalysis.labels import MAX_NAME

    text = " ".join(str(description).split()) or "slice"
    return text if len(text) <= MAX_NAME else text[: MAX_NAME - 1] + "…"


def slice_to_type(run_key: str, name: str, definition: str, ids: list[str], clusters: dict[str, int]) -> None:
    """One click on the Slices page: create the error type `name` (or reuse the one of that name) and assign the
    slice's failing examples `ids` to it, as a human label, with their current clusters. Failures that already have
    another error type, or are flagged (label is wrong, not an error), keep it unless state.SLICE_OVERWRITE is on."""

    def act() -> str:
        store = ui.open_labels()
        etype = store.find_error_type(name)  # the store's one rule for comparing names
        created = etype is None
        if created:
            etype = store.create_error_type(name, definition, "medium")
        st.session_state[state.LABEL_TARGET] = etype.id
        st.session_state[state.LABEL_FROM_TYPE] = etype.id
        keep: set[str] = set()
        if not st.session_state.get(state.SLICE_OVERWRITE):
            a = store.assignments(run_key, include_rejected=False)
            keep = set(a.loc[(a["status"] == "accepted") & (a["error_type_id"] != etype.id), "example_id"])
            keep |= set(store.flags(run_key)["example_id"])
        todo = [i for i in ids if i not in keep]
        shown = ui.md(etype.name)  # the slice's words are user text: no Markdown in the message
        lead = f"Created error type “{shown}”" if created else f"Used the existing error type “{shown}”"
        left = len(ids) - len(todo)
        tail = (f" ({left:,} that already had an error type or a flag kept it)" if left else "")
        if not todo:
            return f"{lead}; no failing example of the slice was left to assign{tail}."
        change = store.assign(run_key, todo, etype.id, source="human",
                              cluster_ids={i: clusters[i] for i in todo if i in clusters},
                              summary=f"assigned {len(todo)} failing examples of slice {name!r} to {etype.name!r}")
        return f"{lead} and assigned {change.changed:,} failing examples of the slice to it{tail}."

    _run(act)
