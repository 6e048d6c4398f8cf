"""`--help` never cuts an option's name: in a narrow terminal or through a pipe (rich's 80 columns), Typer's options
table shrinks every column alike and cut names (`--min-cluster-s…`), which cannot then be searched for or typed.
Here the name columns keep their width, and the type and help columns wrap instead, a long word of help breaking
rather than ending in "…". Installed only when help is printed, so a command's start-up does not import rich's
tables."""

from __future__ import annotations


def install() -> None:
    import typer.rich_utils as rich_utils
    from rich.table import Table
    from rich.text import Text

    if getattr(rich_utils.Table, "keeps_names", False):
        return

    class OptionsTable(Table):
        keeps_names = True

        def add_row(self, *renderables, **kwargs) -> None:
            if not self.show_header and renderables:  # Typer's options and commands tables
                for part in [renderables[-1], *getattr(renderables[-1], "renderables", [])]:  # the help cell
                    if isinstance(part, Text):
                        part.overflow = "fold"
            super().add_row(*renderables, **kwargs)
            if not self.show_header:  # every column but the type and the help keeps its width
                for column in self.columns[:-2]:
                    column.no_wrap = True

    rich_utils.Table = OptionsTable
