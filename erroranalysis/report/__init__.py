"""Reports to share: one self-contained HTML file per run or comparison (Plotly's JS inlined; no network when
it is viewed), drawn from the documents `erroranalysis.stages` reads from runs (pure: dicts in, HTML out).

    from erroranalysis import stages
    stages.write_run_report("runs/x", "report.html")       # erroranalysis report runs/x --out report.html
"""

from __future__ import annotations

from erroranalysis.report.compare_page import SECTIONS as COMPARE_SECTIONS
from erroranalysis.report.compare_page import render_compare
from erroranalysis.report.page import esc, table
from erroranalysis.report.run_page import GENERATION_SECTIONS, render_run
from erroranalysis.report.run_page import SECTIONS as RUN_SECTIONS

__all__ = ["COMPARE_SECTIONS", "GENERATION_SECTIONS", "RUN_SECTIONS", "esc", "render_compare", "render_run", "table"]
