"""The Trainer callback: error analysis at each evaluation, with the model already in memory.

    from erroranalysis.integrations import attach
    attach(trainer, "eval.jsonl", out="runs/my-experiment", data=DataOptions(id_column="id"))
    trainer.train()          # runs/my-experiment/step-000500/, step-001000/, ... and eval_ea/* in the logs

At each evaluation (or every `every` steps) the callback puts the model in eval mode, runs the eval set through it
without gradients (the infer stage's own batching, no reload, no copy of the weights), puts it back in training
mode, and writes a run per step through the normal stages (erroranalysis.stages.analyze_step). It then logs
per-class F1 (for a causal LM: output-check pass rates) and the size of each error type, matched across steps
(erroranalysis.timeline), through `trainer.log`, so every `report_to` integration (TensorBoard, W&B) receives them
as `eval/ea/...`; MLflow's, which keeps keys as given, is handed the same `eval/ea/...` names. A plain callback is not handed the Trainer, so `attach` adds the callback and gives it the
Trainer; a callback without one still records its values in the Trainer's log history.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from pathlib import Path

from transformers import TrainerCallback

from erroranalysis import stages
from erroranalysis.core.errors import DataError
from erroranalysis.core.params import is_int
from erroranalysis.core.validation import check_choice, check_param
from erroranalysis.integrations.reuse import IncrementalReducer, MemoryMiniLM
from erroranalysis.integrations.tracker_values import step_values
from erroranalysis.rundir import readers
from erroranalysis.sources.table import DataOptions, read_eval_set

logger = logging.getLogger("erroranalysis")
PREFIX = "eval_ea/"  # report_to integrations file "eval_*" keys under eval/: eval/ea/f1/<class>, eval/ea/type/T3
TASKS = ("auto", "classification", "generation")


class ErrorAnalysisCallback(TrainerCallback):
    """Analyze the model at each evaluation (or every `every` steps) into `out/step-NNNNNN` runs.

    Parameters
    ----------
    eval_set : path of the eval set (JSONL, CSV, Parquet, a save_to_disk folder); a prompt set for causal LMs
    out : folder of the step runs (default: runs/<the Trainer's output_dir name>)
    data : how to read the eval set (DataOptions: text, label, id columns)
    infer : InferParams (batch size, max length); hidden states are not kept unless `keep_hidden` (then float16)
    after : AfterParams: the stages after inference (default: metrics, slices, clusters; no data checks); the
        cluster stage's reducer is kept across steps (IncrementalReducer) and eval texts are embedded once
    generation : GenerationParams for a causal LM (its output checks come from the prompt set's columns)
    task : "auto" (a model that can generate is a causal LM), "classification" or "generation"
    taxonomy : "auto" applies the labeled taxonomy of the latest labeled step; a taxonomy file; None
    gate : compare each step with the previous one (`compare --fail-on-regression`'s rule) and log the count;
        `stop_on_regression` also stops training when one is found
    tokenizer : when the Trainer was not given one (processing_class)
    """

    def __init__(self, eval_set, out=None, *, data: DataOptions = DataOptions(), infer=None, after=None,
                 generation=None, task: str = "auto", every: int | None = None, keep_hidden: bool = False,
                 taxonomy="auto", gate: bool = False, stop_on_regression: bool = False, alpha: float = 0.05,
                 tokenizer=None, log: bool = True, reuse: bool = True):
        from erroranalysis.infer.generation import GenerationParams

        check_choice("task", task, TASKS)
        check_param("every", every, every is None or (is_int(every) and every >= 1), "an integer >= 1, or None "
                    "to analyze at each evaluation")
        self.eval_path = Path(eval_set)
        self.out = None if out is None else Path(out)
        self.data = data
        self.infer = (infer or stages.InferParams()).replace(hidden="float16" if keep_hidden else "none")
        self.generation = generation or GenerationParams()
        self.task = task
        self.every = every
        self.taxonomy = taxonomy
        self.gate, self.stop_on_regression, self.alpha = gate or stop_on_regression, stop_on_regression, alpha
        self.tokenizer = tokenizer
        self.log_values = log
        self.after = self._after(after or stages.AfterParams(checks=None), reuse)
        cluster = self.after.cluster
        self.embedder = MemoryMiniLM(batch_size=cluster.embed_batch_size, cache=cluster.cache) \
            if reuse and cluster is not None and cluster.embedder == "minilm" else None
        self.trainer = None
        if not self.eval_path.exists():
            raise DataError(f"{self.eval_path}: no such file; check the eval set's path.")
        # a classification eval set is checked now; with "auto" it is read once the model says which task it is
        self.eval_set = read_eval_set(self.eval_path, data) if task == "classification" else None
        self.prepared = None
        self.runs: list[Path] = []
        self.seconds: list[float] = []
        self.gates: list = []
        self._done: set[int] = set()

    @staticmethod
    def _after(after, reuse: bool):
        cluster = after.cluster
        if reuse and cluster is not None and isinstance(cluster.reducer, str):
            reducer = IncrementalReducer(cluster.reducer, n_components=cluster.n_components,
                                         n_neighbors=cluster.n_neighbors, seed=cluster.seed)
            after = after.replace(cluster=cluster.replace(reducer=reducer))
        return after

    # -- Trainer events ----------------------------------------------------------------------------------------

    def on_train_begin(self, args, state, control, model=None, processing_class=None, **kwargs):
        if self.out is None:
            self.out = Path("runs") / Path(args.output_dir).name
        self.tokenizer = self.tokenizer or getattr(processing_class, "tokenizer", None) or processing_class
        check_param("tokenizer", self.tokenizer, self.tokenizer is not None,
                    "the tokenizer: give the Trainer processing_class=tokenizer, or the callback tokenizer=...")
        if self.task == "auto":
            self.task = "generation" if model is not None and model.can_generate() else "classification"
        if self.task == "generation":
            self.prepared = stages.prepare_prompts(self.eval_path, self.data, self.generation)
            return
        if self.eval_set is None:
            self.eval_set = read_eval_set(self.eval_path, self.data)
        if model is not None:  # labels the model does not know fail now, not at the first evaluation
            stages.classifier_job(model, self.tokenizer, self.eval_set, self.infer, path=args.output_dir,
                                  label_column=self.data.label_column)

    def on_evaluate(self, args, state, control, model=None, **kwargs):
        if self.every is None:
            self.analyze(args, state, control, model)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if self.every is not None and state.global_step % self.every == 0:
            self.analyze(args, state, control, model)

    # -- one step ------------------------------------------------------------------------------------------------

    def analyze(self, args, state, control, model):
        """Analyze the model as it is now into the run of `state.global_step`; log what it found."""
        step = int(state.global_step)
        if model is None or step in self._done or not getattr(state, "is_world_process_zero", True):
            return  # one analysis per step, by the main process of a distributed run
        self._done.add(step)
        start = time.perf_counter()
        training = model.training
        model.eval()
        try:
            run = self._run(args, state, model, step)
        finally:
            model.train(training)
        self.runs.append(run.path)
        found = stages.gate_step(run, alpha=self.alpha) if self.gate else None
        if found is not None:
            self.gates.append(found)
            for r in found.regressions:
                logger.warning("erroranalysis: step %s regressed against %s: %s", step, Path(found.base).name,
                               r["text"])
            if found.failed and self.stop_on_regression:
                control.should_training_stop = True
        doc = stages.build_timeline(self.out)
        for event in doc["events"]:
            if event["step"] == step:
                logger.info("erroranalysis: %s", event["text"])
        self.seconds.append(time.perf_counter() - start)
        if self.log_values:
            self._log(state, step_logs(run, doc, step, gate=found, seconds=self.seconds[-1]))

    def _run(self, args, state, model, step: int):
        training_state = trainer_state(state)
        checkpoint = expected_checkpoint(args, step)
        common = {"step": step, "epoch": state.epoch, "source": "callback", "checkpoint": checkpoint,
                  "after": self.after, "taxonomy": self.taxonomy, "embedder": self.embedder}
        if self.task == "generation":
            from erroranalysis.infer.causal_lm import wrap_causal_lm

            lm = wrap_causal_lm(model, self.tokenizer, path=checkpoint or args.output_dir)
            return stages.analyze_generation_step(self.out, lm, self.prepared, self.generation,
                                                  training_state=training_state, **common)
        job = stages.classifier_job(model, self.tokenizer, self.eval_set, self.infer,
                                    path=checkpoint or args.output_dir, training_state=training_state,
                                    label_column=self.data.label_column)
        return stages.analyze_step(self.out, job, **common)

    def _log(self, state, logs: dict) -> None:
        if self.trainer is None:  # not attached: the values still reach trainer_state.json
            state.log_history.append({**logs, "step": state.global_step})
            return
        handler = self.trainer.callback_handler
        mlflow = [cb for cb in handler.callbacks if type(cb).__name__ == "MLflowCallback"]
        callbacks = handler.callbacks
        handler.callbacks = [cb for cb in callbacks if cb not in mlflow]  # a new list: the handler's loop goes on
        try:
            self.trainer.log(dict(logs))  # every other report_to callback receives them
        finally:
            handler.callbacks = callbacks
        for cb in mlflow:  # MLflow keeps keys as given: send the names TensorBoard and W&B show (eval/ea/...)
            cb.on_log(self.trainer.args, state, self.trainer.control, logs=grouped_for_mlflow(logs))

    @property
    def share(self) -> dict:
        """Seconds spent analyzing, per step and in all."""
        return {"steps": [p.name for p in self.runs], "seconds": [round(s, 3) for s in self.seconds],
                "total": round(sum(self.seconds), 3)}


def attach(trainer, eval_set, out=None, **kwargs) -> ErrorAnalysisCallback:
    """Add an ErrorAnalysisCallback to `trainer` and give it the Trainer, so its values go through `trainer.log`
    (and so to every `report_to` integration); returns the callback."""
    callback = ErrorAnalysisCallback(eval_set, out, **kwargs)
    callback.trainer = trainer
    trainer.add_callback(callback)
    return callback


def trainer_state(state) -> dict:
    """The TrainerState as the JSON its trainer_state.json holds (the training log so far)."""
    return json.loads(json.dumps(dataclasses.asdict(state), default=str))


def expected_checkpoint(args, step: int) -> str | None:
    """The checkpoint folder the Trainer saves for this step, when it saves one at this step."""
    strategy = str(getattr(args, "save_strategy", "no")).split(".")[-1].lower()
    save_steps = getattr(args, "save_steps", 0) or 0
    if strategy == "steps" and save_steps and step % int(save_steps) == 0:
        return str(Path(args.output_dir) / f"checkpoint-{step}")
    return None


def step_logs(run, doc: dict, step: int, *, gate=None, seconds: float | None = None) -> dict[str, float]:
    """The values logged for one step: per-class F1 (or output-check pass rates), overall figures, the size of
    each error type present at the step (by its id across steps), new and gone types (`tracker_values.step_values`,
    under `eval_ea/`), the eval set's mean loss, regressions and seconds."""
    import numpy as np

    logs = step_values(doc, step, PREFIX, raw_names=True)
    loss = readers.read_predictions(run, columns=["loss"])["loss"].to_numpy(dtype=np.float64)
    if np.isfinite(loss).any():  # the eval set's mean loss: with `every`, the callback can stand in for evaluate
        logs[PREFIX + "loss"] = float(np.nanmean(np.where(np.isfinite(loss), loss, np.nan)))
    if gate is not None:
        logs[PREFIX + "regressions"] = float(len(gate.regressions))
    if seconds is not None:
        logs[PREFIX + "seconds"] = round(float(seconds), 3)
    return logs


def grouped_for_mlflow(logs: dict) -> dict:
    """The keys as the Trainer's TensorBoard and W&B integrations show them (`eval_ea/x` -> `eval/ea/x`, their
    `rewrite_logs`); its MLflow integration logs keys unchanged, so the callback gives it these."""
    return {("eval/" + k[len("eval_"):] if k.startswith("eval_") else k): v for k, v in logs.items()}
