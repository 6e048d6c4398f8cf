"""`erroranalysis import-taxonomy TAXONOMY.json`: bring a taxonomy's error types into another workspace."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from erroranalysis.cli import common


class OnClash(str, Enum):
    reuse = "reuse"
    update = "update"
    fail = "fail"


def register(app: typer.Typer) -> None:
    app.command("import-taxonomy", help="Create a taxonomy's error types (name, definition, severity) in a workspace's "
                                        "labels database. Idempotent: types that exist by name are reused.")(
        import_taxonomy)


@common.handle_errors
def import_taxonomy(
    taxonomy: Annotated[Path, typer.Argument(
        help="A taxonomy JSON export ('erroranalysis export RUN --format json').")],
    labels_db: Annotated[Optional[Path], typer.Option(
        "--labels-db", help="The workspace's labels database (created when missing); default runs/labels.sqlite "
                            "when ./runs is a folder (see docs/labels.md).")] = None,
    on_clash: Annotated[OnClash, typer.Option(
        "--on-clash", help="An error type of the same name (case-insensitive) exists with another definition or "
                           "severity: reuse it as it is, update it to the taxonomy's, or fail.")] = OnClash.reuse,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what would change; write nothing.")] = False,
    as_json: common.Json = False,
) -> None:
    """Import a taxonomy's error types into a labels database."""
    from rich.markup import escape

    from erroranalysis.core.errors import UserError
    from erroranalysis.labels import LabelStore, importing
    from erroranalysis.labels.workspace import db_from_cwd

    if labels_db is None:
        labels_db = db_from_cwd()
    if labels_db.is_dir():
        raise UserError(f"{labels_db}: is a directory; pass the labels database file, e.g. "
                        f"{labels_db / 'labels.sqlite'}.")
    doc = importing.load_taxonomy(taxonomy)
    out = common.console()
    out.soft_wrap = True
    if dry_run:
        if not labels_db.exists() and as_json:
            common.print_json({"labels_db": str(labels_db), "plan": [
                {"action": "create", "name": t["name"], "differences": []} for t in doc["error_types"]]})
            return
        if not labels_db.exists():
            out.print(f"{escape(str(labels_db))} does not exist yet: all {len(doc['error_types'])} error types would "
                      "be created.")
            return
        plan = importing.plan_import(doc, LabelStore(labels_db, create=False), on_clash=on_clash.value)
        if as_json:
            common.print_json({"labels_db": str(labels_db), "plan": plan})
            return
        for item in plan:
            diffs = ", ".join(f for f, _, _ in item["differences"])
            out.print(f"{item['action']:>7}  {escape(item['name'])}" + (f"  (differs: {diffs})" if diffs else ""))
        return
    result = importing.import_taxonomy(doc, LabelStore(labels_db), on_clash=on_clash.value)
    if as_json:
        common.print_json({"labels_db": str(labels_db), "created": result.created, "reused": result.reused,
                           "updated": result.updated, "clashes": result.clashes})
        return
    out.print(f"{escape(str(taxonomy))} → {escape(str(labels_db))}: {result.summary()}.")
    for name in result.created:
        out.print(f"  created  {escape(name)}")
    for name in result.updated:
        out.print(f"  updated  {escape(name)}")
    for clash in result.clashes:
        if clash["field"] == "name":
            out.print(f"  reused   {escape(clash['ours'])} for {escape(clash['theirs'])} (same name, other case)")
        elif on_clash.value == "reuse":
            out.print(f"  reused   {escape(clash['name'])}: kept this workspace's {clash['field']}; the taxonomy's "
                      "differs (--on-clash update takes it)")
