"""`erroranalysis run`: a checkpoint over an eval set, then metrics and failure clusters."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from erroranalysis.cli import common

Model = Annotated[Path, typer.Option("--model", "-m", help="Checkpoint folder (config.json + model.safetensors).")]
Data = Annotated[Path, typer.Option("--data", "-d", help="Eval set: .jsonl, .csv, .parquet or a save_to_disk folder.")]
TextColumn = Annotated[str, typer.Option("--text-column", help="Column holding the input text.")]
LabelColumn = Annotated[str, typer.Option("--label-column", help="Column holding the gold label.")]
IdColumn = Annotated[Optional[str], typer.Option("--id-column", help="Column of unique example ids (default: row number).")]
Encoding = Annotated[str, typer.Option("--encoding", help="Text encoding of CSV/JSONL files.")]
Split = Annotated[Optional[str], typer.Option("--split", help="Split of a saved DatasetDict.")]
MaxChars = Annotated[int, typer.Option("--max-chars", help="Texts longer than this are cut when read (and flagged "
                                                          "truncated).")]
NoCluster = Annotated[bool, typer.Option("--no-cluster", help="Skip failure clustering.")]
NoSlices = Annotated[bool, typer.Option("--no-slices", help="Skip the search for error slices.")]
NoChecks = Annotated[bool, typer.Option("--no-checks", help="Skip the data checks (label issues, duplicates).")]
Train = Annotated[Optional[Path], typer.Option("--train", help="Training data: adds train/eval leakage and shift to the checks.")]
CheckEmbedder = Annotated[str, typer.Option("--check-embedder", help="Vectors of near duplicates, leakage and shift: auto (the checkpoint's hidden states when the run has them, else MiniLM), hidden, minilm or none.")]
EngineName = Annotated[str, typer.Option("--engine", help="Where inference and embedding run: local (this process) or ray (Ray Data; pip install 'erroranalysis[ray]').")]
RayAddress = Annotated[Optional[str], typer.Option("--ray-address", help="With --engine ray: auto (the cluster this machine is in) or HOST:PORT; default: start a local Ray.")]


def after_params(no_cluster: bool, no_slices: bool, no_checks: bool, train: Path | None, seed: int,
                 check_embedder: str = "auto"):
    from erroranalysis import stages

    check_params = {"embedder": check_embedder, **({"train": str(train)} if train else {})}
    return stages.AfterParams.with_seed(seed, checks=not no_checks, slices=not no_slices, cluster=not no_cluster,
                                        check_params=check_params)


def engine_of(name: str, address: str | None):
    from erroranalysis.engines import Engine

    return Engine(name, address)


def data_options(text_column: str, label_column: str, id_column: str | None, encoding: str, split: str | None,
                 max_chars: int = 100_000):
    from erroranalysis.data import DataOptions

    return DataOptions(text_column=text_column, label_column=label_column, id_column=id_column,
                       encoding=encoding, split=split, max_chars=max_chars)


def report(run) -> None:
    """Where the results are, and the headline numbers."""
    from rich.markup import escape

    metrics = run.metrics()
    overall = metrics["overall"]
    out = common.console()
    out.print(f"[bold]{escape(str(run.path))}[/bold]: {overall['n']} examples, accuracy {overall['accuracy']:.3f}, "
              f"macro F1 {overall['macro_f1']:.3f}, {overall['n_failures']} failures")
    if "output_checks" in metrics:
        checks = metrics["output_checks"]
        out.print(f"output checks: pass rate {checks.get('pass_rate')}, failed {checks.get('n_failed')}, "
                  f"unparseable {checks.get('unparseable')}, low loss but failing "
                  f"{(checks.get('loss') or {}).get('low_loss_failures')}")
    stages = run.manifest["stages"]
    out.print("stages: " + ", ".join(f"{name} {s['status']} ({s.get('seconds', 0):.1f}s)" for name, s in stages.items()),
              markup=False)
    out.print(f"see it: erroranalysis show {run.path}   |   browse it: erroranalysis ui {run.path.parent}", markup=False)


def progress_bar(description: str):
    """A rich progress bar with examples/s; returns (bar, advance(n, total))."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeRemainingColumn,
    )

    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TaskProgressColumn(),
                   TextColumn("{task.fields[rate]}"), TimeRemainingColumn(), transient=True)
    task = bar.add_task(description, total=None, rate="")

    def advance(n: int, total: int) -> None:
        bar.update(task, total=total, advance=n)
        speed = bar.tasks[0].speed
        if speed:
            bar.update(task, rate=f"{speed:.0f} ex/s")

    return bar, advance


GEN = "Generation (--task generation)"


def _split(values: str | None) -> tuple[str, ...]:
    return tuple(v.strip() for v in values.split(",") if v.strip()) if values else ()


def register(app: typer.Typer) -> None:
    @app.command("run")
    @common.handle_errors
    def run_command(
        model: Model,
        data: Data,
        out: common.OutDir,
        task: Annotated[str, typer.Option("--task", help="classification (a sequence classifier) or generation (a causal LM or .gguf).")] = "classification",
        text_column: TextColumn = "text",
        label_column: LabelColumn = "label",
        id_column: IdColumn = None,
        encoding: Encoding = "utf-8",
        split: Split = None,
        max_chars: MaxChars = 100_000,
        batch_size: Annotated[Optional[int], typer.Option("--batch-size", help="Examples per forward pass (default on a CPU: batches of up to 2,048 tokens in fp32 or 4,096 in bf16 and 128 examples; on a GPU 32 examples; 16 for generation).")] = None,
        max_tokens: Annotated[Optional[int], typer.Option("--max-tokens", help="Padded tokens per forward pass, at most (0: no budget; default on a CPU 2,048 in fp32, 4,096 in bf16, when --batch-size is not given).")] = None,
        max_length: Annotated[int, typer.Option("--max-length", help="Tokens per example; longer texts are cut and flagged.")] = 256,
        precision: Annotated[Optional[str], typer.Option("--precision", help="auto (default: bf16 on CUDA, fp32 elsewhere), fp32 or bf16; the manifest records what ran.")] = None,
        device: Annotated[str, typer.Option("--device", help="auto (cuda, mps, cpu), cpu, cuda, cuda:N or mps.")] = "auto",
        trust_remote_code: Annotated[bool, typer.Option("--trust-remote-code", help="Allow code shipped with the checkpoint to run.")] = False,
        max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", rich_help_panel=GEN, help="Tokens to generate per prompt.")] = 64,
        sample: Annotated[bool, typer.Option("--sample", rich_help_panel=GEN, help="Sample (seeded) instead of greedy decoding.")] = False,
        temperature: Annotated[float, typer.Option("--temperature", rich_help_panel=GEN)] = 1.0,
        top_k: Annotated[int, typer.Option("--top-k", rich_help_panel=GEN)] = 0,
        top_p: Annotated[float, typer.Option("--top-p", rich_help_panel=GEN)] = 1.0,
        stop: Annotated[Optional[list[str]], typer.Option("--stop", rich_help_panel=GEN, help="Stop string (repeatable).")] = None,
        output_checks: Annotated[Optional[str], typer.Option("--output-checks", "--checks", rich_help_panel=GEN, help="Comma-separated output checks (default: from the columns present; --checks is the old name).")] = None,
        labels: Annotated[Optional[str], typer.Option("--labels", rich_help_panel=GEN, help="Comma-separated allowed labels beyond the gold ones.")] = None,
        regex: Annotated[Optional[str], typer.Option("--regex", rich_help_panel=GEN, help="Pattern every output must match.")] = None,
        max_prompt_tokens: Annotated[Optional[int], typer.Option("--max-prompt-tokens", rich_help_panel=GEN, help="Longer prompts are cut from the left and flagged.")] = None,
        no_chat_template: Annotated[bool, typer.Option("--no-chat-template", rich_help_panel=GEN, help="Send prompts as plain text.")] = False,
        no_cluster: NoCluster = False,
        no_slices: NoSlices = False,
        no_checks: NoChecks = False,
        train: Train = None,
        check_embedder: CheckEmbedder = "auto",
        engine: EngineName = "local",
        ray_address: RayAddress = None,
        seed: common.Seed = 0,
        overwrite: common.Overwrite = False,
    ) -> None:
        """Run a checkpoint over an eval set: predictions, metrics, error slices and failure clusters."""
        from erroranalysis import stages
        from erroranalysis.progress import reporter
        from erroranalysis.validation import check_param

        check_param("--task", task, task in ("classification", "generation"), "classification or generation")
        data_opts = data_options(text_column, label_column, id_column, encoding, split, max_chars)
        after = after_params(no_cluster, no_slices, no_checks, train, seed, check_embedder)
        where = engine_of(engine, ray_address)
        if task == "classification":
            infer_opts = stages.InferParams(batch_size=batch_size, max_tokens=max_tokens, max_length=max_length,
                                            precision=precision or "auto", device=device,
                                            trust_remote_code=trust_remote_code)
            progress = reporter()
            result = stages.run_checkpoint(model, data, out, data_opts=data_opts, infer_opts=infer_opts, after=after,
                                           overwrite=overwrite, progress=progress, engine=where, log=progress.note)
            report(result)
            return
        check_param("--engine", engine, engine == "local", "local (generation runs in-process)")
        bar, advance = progress_bar("generating")
        if task == "generation":
            from erroranalysis.infer.generation import GenerationParams

            gen_opts = GenerationParams(
                max_new_tokens=max_new_tokens, do_sample=sample, temperature=temperature, top_k=top_k, top_p=top_p,
                seed=seed, stop=tuple(stop or ()), batch_size=16 if batch_size is None else batch_size, max_prompt_tokens=max_prompt_tokens,
                chat_template=not no_chat_template, precision=precision or "auto", device=device,
                trust_remote_code=trust_remote_code, output_checks=_split(output_checks) or None, regex=regex,
                labels=_split(labels))
            with bar:
                result = stages.run_generation(model, data, out, data_opts=data_opts, gen_opts=gen_opts, after=after,
                                        overwrite=overwrite, progress=advance, log=bar.console.print)
        report(result)
