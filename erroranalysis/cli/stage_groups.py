"""The option groups commands share: a stage's parameters, offered alike by `run`, `analyze`, `watch` and the
stage's own command (`erroranalysis cluster`, ...), all from the one declaration of each parameter."""

from __future__ import annotations

from erroranalysis import stages
from erroranalysis.cli.options import Group
from erroranalysis.engines import Engine
from erroranalysis.infer.generation import GENERATION, GenerationParams
from erroranalysis.infer.tokens import PANEL as TOKENS_PANEL
from erroranalysis.integrations.trackers import PANEL as TRACKERS_PANEL
from erroranalysis.integrations.trackers import TrackerParams
from erroranalysis.sources.generations import PANEL as SOURCE_PANEL
from erroranalysis.sources.generations import SourceParams
from erroranalysis.sources.table import DataOptions
from erroranalysis.tasks import PANEL as TASK_PANEL
from erroranalysis.tasks import TaskParams

DATA = Group("data_options", DataOptions, panel="Eval set")
INFER = Group("infer", stages.InferParams, panel="Inference")
TASK = Group("task_options", TaskParams, panel=TASK_PANEL)  # multi-label and regression heads
GENERATION_GROUP = Group("generation", GenerationParams, panel=GENERATION)
TOKENS = Group("tokens", stages.TokenParams, panel=TOKENS_PANEL)  # token classification (NER, POS)
# What `analyze --task token-classification` takes of them: how tags are read, not how a model runs.
TOKEN_READING = Group("tokens", stages.TokenParams, exclude=("aggregation", "batch_size", "max_length", "precision",
                                                            "device", "trust_remote_code"), panel=TOKENS_PANEL)
# What `analyze --task generation` takes of a generation run's parameters: the output checks, not the decoding.
DECODING = ("max_new_tokens", "do_sample", "temperature", "top_k", "top_p", "seed", "stop", "batch_size",
            "max_prompt_tokens", "chat_template", "precision", "device", "trust_remote_code")
OUTPUT_CHECKS = Group("generation", GenerationParams, exclude=DECODING, panel=SOURCE_PANEL)
SOURCE = Group("source", SourceParams, panel=SOURCE_PANEL)
ENGINE = Group("engine", Engine, panel="Engine")
TRACKERS = Group("trackers", TrackerParams, panel=TRACKERS_PANEL)  # --log-to on run, analyze, compare, watch, timeline
METRICS = Group("metrics", stages.MetricsParams, panel="Metrics")
CHECKS = Group("checks", stages.CheckParams, switch="--data-checks/--no-data-checks", panel="Data checks",
               switch_help="Run the data checks (label issues, duplicates, and with --train leakage and shift).")
SLICES = Group("slices", stages.SliceParams, switch="--slices/--no-slices", panel="Error slices",
               switch_help="Search for error slices over words, metadata and length.")
CLUSTER = Group("cluster", stages.ClusterParams, switch="--cluster/--no-cluster", panel="Failure clusters",
                switch_help="Cluster the failures into named error types.")
AFTER = (METRICS, CHECKS, SLICES, CLUSTER)  # the stages that follow the predictions, in order


def after(metrics, checks, slices, cluster) -> stages.AfterParams:
    """The stages after the predictions as the options set them (a group switched off is None)."""
    return stages.AfterParams(metrics=metrics, checks=checks, slices=slices, cluster=cluster)
