"""One self-contained HTML page: sections, tables and Plotly figures, with Plotly's JavaScript inlined, so the file
opens anywhere with no network (nothing is fetched when it is viewed). The script is plotly.js's cartesian partial
bundle (bar, heatmap, scatter and a few more: the smallest that draws the report's charts; 1.5 MB against the full
bundle's 4.8 MB), shipped beside this module for the plotly.js version the installed `plotly` package writes
figures for; with another plotly installed, its own full bundle (`make plotly-bundle` fetches the matching one).

Every text that came from a run (labels, texts, names) is escaped here (`esc`), once, where it enters the page.
"""

from __future__ import annotations

import html
import math
from typing import Any, Callable, Iterable, Sequence

from erroranalysis.metrics.display import percent

CSS = """
:root { --ink: #0f172a; --muted: #64748b; --line: #e2e8f0; --bg: #f8fafc; --accent: #4f46e5; --bad: #b91c1c;
        --good: #15803d; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--ink); }
header { padding: 20px 32px; background: var(--bg); border-bottom: 1px solid var(--line); }
header h1 { margin: 0 0 4px; font-size: 22px; }
header p { margin: 0; color: var(--muted); }
nav { padding: 8px 32px; border-bottom: 1px solid var(--line); position: sticky; top: 0; background: #fff;
      z-index: 2; }
nav a { margin-right: 14px; color: var(--accent); text-decoration: none; white-space: nowrap; }
main { padding: 8px 32px 48px; max-width: 1200px; }
section { margin-top: 28px; }
h2 { font-size: 18px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
h3 { font-size: 15px; margin: 18px 0 6px; }
table { border-collapse: collapse; margin: 8px 0; font-size: 13px; }
th, td { border-bottom: 1px solid var(--line); padding: 4px 10px; text-align: left; vertical-align: top; }
th { background: var(--bg); font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.note { color: var(--muted); font-style: italic; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(340px, 1fr)); gap: 12px; }
.card { border: 1px solid var(--line); border-radius: 8px; padding: 10px 14px; }
.card h3 { margin-top: 0; }
.text { white-space: pre-wrap; font-size: 12px; color: #334155; max-height: 9em; overflow: auto; }
.kpis { display: flex; flex-wrap: wrap; gap: 12px; margin: 10px 0; }
.kpi { border: 1px solid var(--line); border-radius: 8px; padding: 8px 14px; min-width: 130px; }
.kpi b { display: block; font-size: 20px; }
.bad { color: var(--bad); } .good { color: var(--good); }
footer { color: var(--muted); font-size: 12px; margin-top: 40px; }
"""


def esc(value: Any) -> str:
    """Text from a run, safe inside HTML (None as an en dash)."""
    return "–" if value is None else html.escape(str(value), quote=True)


def cut(text: Any, limit: int) -> str:
    text = "" if text is None else str(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def num(value: Any, fmt: str = ".3f") -> str:
    """A number for a table cell; missing or not finite as an en dash."""
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return esc(value)
    if isinstance(value, float) and not math.isfinite(value):
        return "–"
    return format(value, fmt)


def pct(value: Any) -> str:
    return percent(value)  # the one way a rate is shown (erroranalysis.metrics.display)


Column = tuple  # (key or function of the row, header, formatter)


def table(rows: Iterable[dict], columns: Sequence[Column], *, cls: str = "") -> str:
    """An HTML table: each column is (key or function of the row, header, formatter of the value); a formatter
    returns HTML (use `esc` for text), numbers are right-aligned."""
    head = "".join(f"<th>{esc(header)}</th>" for _, header, _ in columns)
    body = []
    for row in rows:
        cells = []
        for key, _, fmt in columns:
            value = key(row) if callable(key) else row.get(key)
            numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
            cells.append(f"<td{' class=num' if numeric else ''}>{(fmt or esc)(value)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    if not body:
        return '<p class="note">Nothing to show.</p>'
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def kpis(items: Iterable[tuple[str, str]]) -> str:
    """Headline figures: (label, formatted value) pairs."""
    return '<div class="kpis">' + "".join(f'<div class="kpi"><b>{value}</b>{esc(label)}</div>'
                                          for label, value in items) + "</div>"


def note(text: str) -> str:
    return f'<p class="note">{esc(text)}</p>'


def section(key: str, title: str, body: str) -> str:
    """A section of the page, found by tests and links as `#<key>` and `data-section="<key>"`."""
    return f'<section id="{esc(key)}" data-section="{esc(key)}"><h2>{esc(title)}</h2>{body}</section>'


def figure(fig) -> str:
    """A Plotly figure as a div and its script (the library itself is inlined once, in `page`)."""
    return fig.to_html(full_html=False, include_plotlyjs=False, config={"displaylogo": False, "responsive": True},
                       default_height="420px")


PARTIAL_BUNDLE = "plotly-cartesian.min.js"  # npm's plotly.js-cartesian-dist-min, MIT; its header names its version


def plotly_js() -> str:
    """plotly.js for the page: the cartesian partial bundle when it is the version the installed plotly package
    writes figures for, else that package's own full plotly.min.js."""
    from pathlib import Path

    from plotly.offline import get_plotlyjs, get_plotlyjs_version

    partial = Path(__file__).with_name(PARTIAL_BUNDLE)
    if partial.is_file():
        script = partial.read_text(encoding="utf-8")
        if f" v{get_plotlyjs_version()}\n" in script[:200]:
            return script
    return get_plotlyjs()


def page(title: str, subtitle: str, sections: Sequence[tuple[str, str, str]], footer: str = "", *,
         script: Callable[[], str] = plotly_js) -> str:
    """The whole document: a header, a link per section, the sections ((key, title, body) each)."""
    links = "".join(f'<a href="#{esc(key)}">{esc(name)}</a>' for key, name, _ in sections)
    body = "".join(section(key, name, content) for key, name, content in sections)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{esc(title)}</title>"
            f"<style>{CSS}</style><script>{script()}</script></head><body>"
            f"<header><h1>{esc(title)}</h1><p>{esc(subtitle)}</p></header><nav>{links}</nav>"
            f"<main>{body}<footer>{esc(footer)}</footer></main></body></html>\n")
