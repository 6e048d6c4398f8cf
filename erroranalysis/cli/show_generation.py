"""`erroranalysis show` on a generation run: what an LLM engineer reads first (lm-eval's table and Inspect's
per-scorer summary are the models): each check's pass rate, the failure modes with an exemplar, per task or
filter, stop reasons and lengths against the limit, loss beside behaviour; a confusion matrix only when the prompts
had a label column. Rendering only: the figures are metrics.json's `output_checks` (erroranalysis.metrics)."""

from __future__ import annotations

from erroranalysis.metrics.display import output_length, percent, rate
from erroranalysis.metrics.generation import pooled_filters

EXEMPLAR_CHARS = 60  # characters of an exemplar's output in a table cell


# How figures are shown to people: the one rule (metrics.json keeps full precision)
pct = percent  # a rate: a percent with one decimal
sig = rate  # any other figure: three significant digits


def one_line(text, limit: int = EXEMPLAR_CHARS) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def print_generation(metrics: dict, run, out) -> None:
    """The generation run's summary, before its clusters."""
    from rich.markup import escape
    from rich.table import Table

    checks = metrics["output_checks"]
    _source_scores(run, out)
    filters = pooled_filters(checks)
    if filters > 1:
        out.print(f"{filters} filters: each document is a row per filter, so read the pass rates per filter "
                  "below, not pooled", markup=False)
    else:
        out.print(f"passed every check: {checks['n_passed']:,} of {checks['n']:,} ({pct(checks['pass_rate'])})",
                  markup=False)
    table = Table(title="Output checks", title_justify="left")
    for column in ("check", "applied", "passed", "pass rate"):
        table.add_column(column, justify="left" if column == "check" else "right")
    for row in checks.get("per_check") or []:
        table.add_row(escape(row["check"]), f"{row['applied']:,}", f"{row['passed']:,}", pct(row["pass_rate"]))
    out.print(table)
    _groups(checks, out)
    _failure_modes(checks, out)
    _stops(checks, out)
    _loss(checks, out)
    if checks.get("label_column"):
        from erroranalysis.cli.show_classes import print_classes

        o = metrics["overall"]
        out.print(f"label extracted from the output: accuracy {pct(o.get('accuracy'))}, macro F1 "
                  f"{sig(o.get('macro_f1'))}, {checks.get('unparseable', 0):,} unparseable", markup=False)
        print_classes(metrics, run, out)


def _source_scores(run, out) -> None:
    """The source's own table (lm-eval's: task, filter, metric, value), every filter, before the one analyzed."""
    from rich.markup import escape
    from rich.table import Table

    data = (run.manifest.get("data") or {}) if run is not None else {}
    rows = data.get("filters") or []
    if not rows:
        return
    table = Table(title="lm-eval's scores, per filter", title_justify="left")
    for column in ("task", "filter", "metric", "value", "n", "no answer extracted"):
        table.add_column(column, justify="left" if column in ("task", "filter", "metric") else "right")
    for row in rows:
        table.add_row(escape(str(row.get("task") or "")), escape(str(row["filter"])), escape(str(row["metric"])),
                      sig(row.get("value")), f"{row.get('n', 0):,}", f"{row.get('no_answer', 0):,}")
    out.print(table)
    if len({r["filter"] for r in rows}) > 1:
        out.print(f"analyzed below: the failures of filter {data.get('filter')} (--filter NAME for another)",
                  markup=False)


def _groups(checks: dict, out) -> None:
    from rich.markup import escape
    from rich.table import Table

    rows, columns = checks.get("per_group") or [], checks.get("group_columns") or []
    if not rows:
        return
    names = list(rows[0]["checks"]) if rows else []
    for row in rows[1:]:
        names += [n for n in row["checks"] if n not in names]
    table = Table(title="Per " + " and ".join(columns), title_justify="left")
    for column in [*columns, "n", "passed", "pass rate", *names]:
        table.add_column(escape(column), justify="left" if column in columns else "right")
    for row in rows:
        table.add_row(*[escape(row["group"][c]) for c in columns], f"{row['n']:,}", f"{row['n_passed']:,}",
                      pct(row["pass_rate"]), *[pct(row["checks"].get(n)) for n in names])
    out.print(table)


def _failure_modes(checks: dict, out) -> None:
    from rich.markup import escape
    from rich.table import Table

    modes = checks.get("failure_reasons") or []
    if not modes:
        return
    table = Table(title=f"Failure modes ({checks['n_failed']:,} failing outputs; one may fail several ways)",
                  title_justify="left")
    for column in ("failure reason", "failures", "share", "exemplar"):
        table.add_column(column, justify="right" if column in ("failures", "share") else "left")
    for row in modes:
        ex = row.get("exemplar") or {}
        shown = f"{ex.get('example_id')}: {one_line(ex.get('output'))}" if ex else ""
        table.add_row(escape(row["reason"]), f"{row['count']:,}", pct(row["share_of_failures"]), escape(shown))
    out.print(table)


def _stops(checks: dict, out) -> None:
    from rich.markup import escape
    from rich.table import Table

    stops = checks.get("per_stop_reason") or []
    if stops:
        table = Table(title="Stop reasons", title_justify="left")
        for column in ("stop reason", "outputs", "pass rate", "mean length"):
            table.add_column(column, justify="left" if column == "stop reason" else "right")
        for row in stops:
            table.add_row(escape(row["stop_reason"]), f"{row['n']:,}", pct(row["pass_rate"]),
                          sig(row.get("mean_output_tokens")))
        out.print(table)
    length = checks.get("output_length")
    if length and length.get("mean") is not None:
        out.print(output_length(length), markup=False)


def _loss(checks: dict, out) -> None:
    loss = checks.get("loss") or {}
    parts = []
    for column in ("reference_loss", "output_loss"):
        figures = loss.get(column) or {}
        if figures.get("mean") is not None:
            parts.append(f"{column} {sig(figures.get('mean_passed'))} passing vs {sig(figures.get('mean_failed'))} "
                         "failing")
    if not parts:
        return
    low = loss.get("low_loss_failures") or 0
    ids = ", ".join(loss.get("low_loss_failure_ids") or [])
    out.print("loss beside behaviour: " + "; ".join(parts) + f"; {low:,} failures with a low reference loss"
              + (f" (lowest first: {one_line(ids)})" if low else ""), markup=False)
