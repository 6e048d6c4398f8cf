"""`--help` never cuts an option's name: in a narrow terminal or through a pipe (rich's 80 columns), Typer's options
table shrinks every column alike and cut names (`--min-cluster-s…`), which cannot then be searched for or typed.
Here the name columns keep their width and the type and help columns wrap instead. Installed only when help is
printed, so a command's start-up does not import rich's tables."""

from __future__ import annotations


def install() -> None:
    import typer.rich_utils as rich_utils
    from rich.table import Table

    if getattr(rich_utils.Table, "keeps_names", False):
        return

    class OptionsTable(Table):
        keeps_names = True

        def add_row(self, *renderables, **kwargs) -> None:
            super().add_row(*renderables, **kwargs)
            if not self.show_header:  # Typer's options and commands tables: all but the type and help columns
                for column in self.columns[:-2]:
                    column.no_wrap = True

    made = rich_utils._make_rich_text

    def folded(**kwargs):
        text = made(**kwargs)
        if hasattr(text, "overflow"):  # a long word of help (a path, a URL) breaks rather than ends in "…"
            text.overflow = "fold"
        return text

    rich_utils.Table = OptionsTable
    rich_utils._make_rich_text = folded
