"""`erroranalysis sft-check --model TOKENIZER --data train.jsonl --out runs/sft`: what the trainer will train on."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from erroranalysis.cli import common, options
from erroranalysis.sft.params import SftParams

SFT = options.Group("sft", SftParams)
STATE_STYLE = {0: "dim", 1: "bold green", 2: "dim strike red"}  # masked, trained, cut by max_length


def register(app: typer.Typer) -> None:
    app.command("sft-check", help="Check SFT training data the way the trainer will see it: render the rows with the "
                                  "tokenizer's chat template and mask them as TRL does (or read your own tokenized "
                                  "rows), then report rows that train nothing, train the prompt, lose their answer "
                                  "or EOS to max_length, mask EOS, double BOS, differ from the chat template, carry "
                                  "hand-shifted labels, empty answers, duplicates or over-long rows.")(sft_check)


@common.handle_errors
@options.takes(SFT)
def sft_check(
    model: Annotated[Path, typer.Option("--model", "-m", help="Tokenizer or checkpoint folder, or a .gguf file.")],
    data: Annotated[str, typer.Option("--data", "-d", help="Training rows: .jsonl, .csv, .parquet or a "
                                                           "save_to_disk folder (messages, prompt/completion or text); "
                                                           "or an s3://, gs://, az:// URL of a file.")],
    out: common.OutDir,
    show: Annotated[int, typer.Option("--show", min=0, max=1000, help="Print this many rows with their trained "
                                                                      "tokens highlighted, rows with findings first.")] = 0,
    overwrite: common.Overwrite = False,
    as_json: common.Json = False,
    json_out: common.JsonOut = None,
    *, sft,
) -> None:
    """What will the trainer actually train on?"""
    from erroranalysis import stages
    from erroranalysis.core.progress import reporter

    common.check_json_out(json_out)
    phases = reporter().phases("sft-check")
    run, result = stages.sft_check(model, data, out, sft, overwrite=overwrite, progress=phases)
    phases("", 0, 0)
    document = {"run": str(run.path), **result.summary}
    common.write_json_out(json_out, document)
    if as_json:
        common.print_json(document)
        return
    print_summary(run.path, result.summary)
    if show:
        print_rows(result, show)


def print_summary(path: Path, s: dict) -> None:
    """The summary of an sft-check run (also what `erroranalysis show RUN` prints for one)."""
    from rich.markup import escape
    from rich.table import Table

    out = common.console()
    trained = s["trained_tokens_per_row"]
    out.print(f"[bold]{s['rows']:,} rows[/bold] ({s['format']}, mode {s['mode']}, max_length {s['max_length']}): "
              f"{s['rows_with_findings']:,} with findings; {trained['mean']} trained tokens per row on average, "
              f"{s['trained_share']:.0%} of the tokens kept are trained", soft_wrap=True)
    table = Table(show_edge=False, pad_edge=False)
    for column in ("kind", "rows", "what it means"):
        table.add_column(column, justify="right" if column == "rows" else "left")
    for kind, n in s["counts"].items():
        if n:
            table.add_row(kind, f"{n:,}", escape(s["meanings"][kind]))
    if table.row_count:
        out.print(table)
    else:
        out.print("[green]no findings[/green]")
    for name, part in (s.get("sources") or {}).items():
        out.print(f"  source {escape(name)}: {part['share_of_rows']:.0%} of rows, {part['share_of_trained']:.0%} of "
                  "trained tokens", soft_wrap=True)
    for note in s["notes"]:
        out.print(f"[yellow]note[/yellow] {escape(note)}", soft_wrap=True)
    out.print(f"run {escape(str(path))}", soft_wrap=True)


def print_rows(result, n: int) -> None:
    """Rows as the loss sees them, in the spirit of axolotl's `preprocess --debug`: trained text bold green,
    masked text dim, text max_length cuts away struck through; each row's findings above it."""
    from rich.markup import escape
    from rich.text import Text

    from erroranalysis.core.terminal import visible

    out = common.console()
    rows = result.rows
    flagged = rows[rows["kinds"].map(len) > 0]
    chosen = list(flagged["row"][:n]) + [r for r in rows["row"] if r not in set(flagged["row"])][:max(0, n - len(flagged))]
    details = result.findings.groupby("row")
    out.print("\n[dim]dim: no label[/dim] · [bold green]green: trained[/bold green] · "
              "[dim strike red]struck: cut by max_length[/dim strike red]")
    for row in chosen[:n]:
        entry = rows.iloc[int(row)]
        out.print(f"\n[bold]row {int(row)}[/bold] (line {int(entry['line'])}): {int(entry['n_tokens'])} tokens, "
                  f"{int(entry['n_trained'])} trained")
        if int(row) in details.groups:
            for _, f in details.get_group(int(row)).iterrows():
                out.print(f"  [red]{escape(f['kind'])}[/red]: {escape(str(f['detail']))}", soft_wrap=True)
        text = Text()
        for segment, state in zip(entry["segments"], entry["segment_state"]):
            # a Text is never parsed as markup, nor passed through the console's render_str: made visible here
            text.append(visible(segment), style=STATE_STYLE.get(int(state), ""))
        out.print(text, soft_wrap=True)
