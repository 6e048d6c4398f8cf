"""`erroranalysis timeline runs/EXPERIMENT`: classes' F1 and error types across a training run's steps, beside the
training signals, with what happened in words; `--prune` drops old steps' bulky artifacts."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from erroranalysis.cli import common, options
from erroranalysis.cli.stage_groups import TRACKERS
from erroranalysis.timeline import TrackParams

MAX_COLUMNS = 12  # step columns shown in the tables; longer runs show evenly spaced steps (all are in --json)


def register(app: typer.Typer) -> None:
    app.command("timeline", help="Per-class F1 and the size of each error type (matched across steps) of a "
                                 "training run's step runs, beside loss, learning rate and grad norm, with events "
                                 "in words. --prune drops the probabilities, hidden states and embeddings of all "
                                 "but the latest steps (predictions, metrics and clusters stay).")(timeline)


@common.handle_errors
@options.takes(options.Group("tracking", TrackParams), TRACKERS)
def timeline(
    path: Annotated[Path, typer.Argument(help="The folder of step runs (runs/EXPERIMENT), or one of them.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the timeline as JSON.")] = False,
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Write timeline.json here (a file or a "
                                                                    "folder).")] = None,
    prune: Annotated[bool, typer.Option("--prune", help="Drop bulky artifacts of old steps first.")] = False,
    keep_last: Annotated[int, typer.Option("--keep-last", help="With --prune: steps left whole.")] = 1,
    labels_db: Annotated[Optional[Path], typer.Option(
        "--labels-db", help="Labels database (default: the experiment's, by the workspace rule).")] = None,
    *, tracking, trackers,
) -> None:
    """The timeline of a training run."""
    from erroranalysis import stages
    from erroranalysis.core.validation import check_int

    trackers.require()
    console = common.console()
    if prune:
        check_int("keep_last", keep_last, 0)
        pruned = stages.prune_steps(path, keep_last=keep_last)
        freed = sum(p["bytes_freed"] for p in pruned)
        if not as_json:
            console.print(f"pruned {len(pruned)} step run(s), {freed / 2**20:.1f} MiB freed "
                          f"(kept whole: the latest {keep_last})", markup=False)
    doc = stages.build_timeline(path, labels_db=labels_db, params=tracking)
    if trackers.log_to:
        import sys

        from erroranalysis.integrations import trackers as tracker_log

        print(f"logged to {', '.join(tracker_log.log_timeline(doc, trackers))}", file=sys.stderr)
    if out is not None:
        written = stages.write_timeline(doc, out)
        if not as_json:
            console.print(f"wrote {written}", markup=False)
    if as_json:
        common.print_json(doc)
        return
    console.soft_wrap = True
    show(console, doc)


def _shown(steps: list[int]) -> list[int]:
    if len(steps) <= MAX_COLUMNS:
        return steps
    picks = sorted({round(i * (len(steps) - 1) / (MAX_COLUMNS - 1)) for i in range(MAX_COLUMNS)})
    return [steps[i] for i in picks]


def show(out, doc: dict) -> None:
    from rich.markup import escape
    from rich.table import Table

    rows = [r for r in doc["steps"] if "problem" not in r]
    out.print(f"[bold]{escape(doc['experiment'])}[/bold]: {len(rows)} analyzed steps, {len(doc['types'])} error "
              f"types ({doc['task']})")
    table = Table(show_edge=False, header_style="bold")
    for col in ("step", "epoch", "loss", "eval loss", "lr", "acc", "F1", "failures", "types"):
        table.add_column(col, justify="right")
    counts = {r["step"]: sum(any(s["step"] == r["step"] for s in t["steps"]) for t in doc["types"]) for r in rows}
    for r in rows:
        last = r.get("training") or {}
        table.add_row(f"{r['step']:,}" + (" ✂" if r.get("pruned") else ""), _num(r.get("epoch"), ".2f"),
                      _num(last.get("loss"), ".4g"), _num(last.get("eval_loss"), ".4g"),
                      _num(last.get("learning_rate"), ".2g"), _num(r.get("accuracy"), ".3f"),
                      _num(r.get("macro_f1"), ".3f"), f"{r['n_failures']:,}", f"{counts[r['step']]:,}")
    out.print(table, soft_wrap=False)
    shown = _shown([r["step"] for r in rows])
    by_step = {r["step"]: r for r in rows}
    per = "checks" if doc["task"] == "generation" and any(r.get("checks") for r in rows) else "per_class_f1"
    names = list(dict.fromkeys(k for r in rows for k in (r.get(per) or {})))
    if names:
        table = Table(title="Output-check pass rate" if per == "checks" else "F1 per class", show_edge=False,
                      header_style="bold", title_justify="left")
        table.add_column("check" if per == "checks" else "class")
        for s in shown:
            table.add_column(f"{s:,}", justify="right")
        for name in names:
            table.add_row(escape(name), *[_num((by_step[s].get(per) or {}).get(name), ".2f") for s in shown])
        out.print(table, soft_wrap=False)
    if doc["types"]:
        table = Table(title="Error types (failures per step; – absent)", show_edge=False, header_style="bold",
                      title_justify="left")
        table.add_column("type")
        table.add_column("name", max_width=48, overflow="ellipsis", no_wrap=True)
        for s in shown:
            table.add_column(f"{s:,}", justify="right")
        for t in sorted(doc["types"], key=lambda t: -max(x["size"] for x in t["steps"])):
            sizes = {x["step"]: x["size"] for x in t["steps"]}
            table.add_row(t["type_id"], escape(t["name"]), *[f"{sizes[s]:,}" if s in sizes else "–" for s in shown])
        out.print(table, soft_wrap=False)
    for item in doc["labeled"]:
        out.print(f"labeled “{escape(item['name'])}”: " + ", ".join(f"{x['step']:,}: {x['size']:,}"
                                                                    for x in item["steps"]))
    if doc["events"]:
        out.print("[bold]What happened[/bold]")
        for t in doc["types"]:
            if any(e["type_id"] == t["type_id"] for e in doc["events"]):
                out.print(f"  - {escape(t['story'])}")
        for e in doc["events"]:
            if e["type_id"] is None:
                out.print(f"  - {escape(e['text'])}.")
    if doc["findings"]:
        out.print("[bold]Training signals[/bold]")
        for f in doc["findings"]:
            out.print(f"  - {f['severity']}: {escape(f['message'])}")
    for note in doc["notes"]:
        out.print(f"Note: {escape(note)}.")
    out.print(f"see it: erroranalysis ui {Path(doc['experiment']).parent} (the Timeline page)", markup=False)


def _num(value, fmt: str) -> str:
    return "–" if value is None else format(value, fmt)
