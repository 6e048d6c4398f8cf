"""`erroranalysis apply-taxonomy TAXONOMY.json RUN`: suggest the known error types for a new run's failures."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from erroranalysis.cli import common, options
from erroranalysis.cli.import_taxonomy import OnClash
from erroranalysis.labels.matching import MatchParams


def register(app: typer.Typer) -> None:
    app.command("apply-taxonomy", help="Suggest a labeled taxonomy's error types for another run's failures (the "
                                       "nearest type in the run's embedding space); failures too far from every "
                                       "type stay unmatched. Suggestions await review in the app (Review page).")(
        apply_taxonomy)


MATCH = options.Group("match", MatchParams)


@common.handle_errors
@options.takes(MATCH)
def apply_taxonomy(
    taxonomy: Annotated[Path, typer.Argument(
        help="A taxonomy JSON export ('erroranalysis export RUN --format json').")],
    run: common.RunDir,
    labels_db: Annotated[Optional[Path], typer.Option(
        "--labels-db", help="Labels database to store the suggestions in; default: the nearest labels.sqlite "
                            "above RUN, else <RUN's folder>/labels.sqlite (created; see docs/labels.md).")] = None,
    on_clash: Annotated[OnClash, typer.Option(
        "--on-clash", help="An error type of the same name exists with another definition or severity: reuse it "
                           "as it is, update it to the taxonomy's, or fail.")] = OnClash.reuse,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Match and report; store nothing.")] = False,
    as_json: common.Json = False,
    *, match,
) -> None:
    """Suggest error types for a run's failures from a labeled taxonomy."""

    from erroranalysis import stages
    from erroranalysis.labels import LabelStore, importing, labels_db_for
    from erroranalysis.rundir import Run

    out = common.console()
    out.soft_wrap = True
    opened = Run.open(run)
    db = labels_db if labels_db is not None else labels_db_for(opened.path)
    with out.status("Embedding and matching failures…", spinner="dots") if out.is_terminal and not as_json \
            else _nothing():
        if dry_run:
            doc = importing.load_taxonomy(taxonomy)
            store = LabelStore(db, create=False) if Path(db).exists() else None
            if store is not None:
                importing.plan_import(doc, store, on_clash=on_clash.value)
            result = stages.suggest(doc, opened.path, store=store, params=match)
            result.taxonomy = str(taxonomy)
        else:
            result = stages.apply_taxonomy(taxonomy, opened.path, labels_db=db, params=match, on_clash=on_clash.value)
    if as_json:
        common.print_json(result.to_dict())
        return
    _print(out, result, dry_run)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _print(out, result, dry_run: bool) -> None:
    from rich.markup import escape
    from rich.table import Table

    c = result.counts
    verb = "would suggest" if dry_run else "suggested"
    basis = ", ".join(f"{n:,} by {b}" for b, n in sorted(result.by_basis.items()))
    out.print(f"{escape(result.run)}: {verb} an error type for [bold]{result.n_suggested:,}[/bold] of "
              f"{result.n_failures:,} failures" + (f" ({basis})" if basis else "") + "; "
              f"[bold]{result.n_unmatched:,}[/bold] new/unmatched (cosine distance > {result.threshold:.3f}).")
    others = [f"{c[s]:,} {s}" for s in ("kept", "flagged", "rejected before") if c.get(s)]
    if others:
        out.print("Left alone: " + ", ".join(others) + " (labeled already, flagged, or a suggestion a person "
                  "rejected).")
    out.print(f"Threshold {escape(result.threshold_basis)}.")
    for note in result.notes:
        out.print(f"Note: {escape(note)}.")
    if result.imported is not None:
        imp = result.imported
        out.print(f"Error types in {escape(result.labels_db)}: {imp.summary()}.")
        for clash in imp.clashes:
            if clash["field"] != "name":
                out.print(f"  {escape(clash['name'])}: kept this workspace's {clash['field']}; the taxonomy's "
                          "differs (--on-clash update takes it).")
    if result.per_type:
        table = Table(show_edge=False, header_style="bold")
        table.add_column("error type")
        table.add_column("suggested", justify="right")
        for name, n in sorted(result.per_type.items(), key=lambda kv: (-kv[1], kv[0].casefold())):
            table.add_row(escape(name), f"{n:,}")
        out.print(table)
    if not dry_run and result.n_suggested:
        out.print(f"Review them in the app (Review page): erroranalysis ui {escape(str(Path(result.run).parent))} "
                  f"--open {escape(result.run_key)}")
