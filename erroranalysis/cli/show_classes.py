"""`show`'s per-class table (with the averages rows classification_report and seqeval end with) and confusion
matrix: what every run with classes prints, a generation run too when its prompts had a label column."""

from __future__ import annotations


def interval(ci) -> str:
    """A 95% interval after a figure: ' [0.812, 0.901]', or nothing."""
    return f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""


def print_classes(metrics: dict, run, out) -> None:
    """The per-class table and the confusion matrix."""
    from rich.markup import escape
    from rich.table import Table

    from erroranalysis.metrics.averages import average_rows
    from erroranalysis.metrics.display import rate

    per_class = Table(title={"multilabel": "Per label", "regression": "Per gold range (bins)"}.get(run.task, "Per class"),
                      title_justify="left")
    for column in ("label", "precision", "recall", "F1 [95% CI]", "support"):
        per_class.add_column(column, justify="left" if column == "label" else "right")
    for row in sorted(metrics["per_class"], key=lambda r: r["f1"] if r["f1"] is not None else 0):
        per_class.add_row(escape(row["label"]), rate(row["precision"]), rate(row["recall"]),
                          f"{rate(row['f1'])}{interval(row.get('f1_ci'))}", f"{row['support']:,}")
    averages = average_rows(run.task, metrics)  # the rows classification_report and seqeval end with
    if averages and per_class.rows:
        per_class.rows[-1].end_section = True
    for row in averages:
        per_class.add_row(row["label"], rate(row["precision"]), rate(row["recall"]), rate(row["f1"]),
                          f"{row['support']:,}")
    out.print(per_class)

    confusion = metrics["confusion"]
    title = "Confusion (rows: true, columns: predicted)" if run.task != "multilabel" else \
        "Labels read instead of others (rows: gold missed, columns: predicted without gold)"
    matrix = Table(title=title, title_justify="left")
    matrix.add_column("true \\ pred")
    for label in confusion["labels"]:
        matrix.add_column(escape(label), justify="right")
    for label, row in zip(confusion["labels"], confusion["matrix"]):
        matrix.add_row(escape(label), *[f"[bold]{v}[/bold]" if label == col else (f"[red]{v}[/red]" if v else "·")
                                for col, v in zip(confusion["labels"], row)])
    out.print(matrix)
