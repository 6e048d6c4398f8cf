"""A training run's step runs with planted error types, made through the real stages (only inference is faked).

Five topics of news-like sentences; at each step some topics' examples are predicted wrong:

    step 100: weather (read as science) and football (read as business) fail
    step 200: ... and cooking (read as news) starts failing
    step 300: weather is fixed; football and cooking still fail

plus a few scattered failures per step. Each step run gets predictions (fake_runs' protocol), a trainer_state.json
with the log so far (a learning rate that drops at step 250), metrics and clusters (real stages, PCA reducer)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from erroranalysis import rundir
from erroranalysis.rundir import Run, create_run

TOPICS = {  # topic -> (gold label, phrases); a text joins two of its topic's phrases
    "weather": ("news", ["heavy rain and strong winds are expected", "forecasters issued a storm warning",
                         "temperatures will fall below freezing overnight", "flooding closed several roads",
                         "thunderstorms and hail hit the region", "snow and ice made driving dangerous",
                         "a heatwave pushed temperatures to record highs", "the fog delayed flights at the airport",
                         "gales brought down power lines", "drought left reservoirs half empty"]),
    "football": ("sport", ["the striker scored twice in the second half", "the manager was sacked after a defeat",
                           "the goalkeeper saved a late penalty", "a stoppage-time header earned a draw",
                           "the club signed a midfielder for a record fee", "fans celebrated promotion to the league",
                           "the referee sent off the captain", "the derby ended goalless",
                           "the winger was injured in training", "the team reached the cup final"]),
    "cooking": ("lifestyle", ["roast the vegetables with garlic and olive oil", "simmer the chicken in coconut milk",
                              "whisk the eggs with sugar and fold in the flour", "slow-cook the lamb with rosemary",
                              "bake the bread until the crust is golden", "season the soup with salt and pepper",
                              "chop the onions and fry them in butter", "serve the pasta with grated cheese",
                              "marinate the fish in lemon juice", "stir the risotto until creamy"]),
    "markets": ("business", ["shares rose after profits beat forecasts", "the central bank kept interest rates",
                             "oil prices fell as producers raised output", "the retailer warned on sales",
                             "bond yields climbed on inflation fears", "the merger created the largest lender",
                             "investors sold technology stocks", "the currency slipped against the dollar",
                             "the company cut its dividend", "quarterly revenue grew faster than expected"]),
    "space": ("science", ["the probe sent back images of a crater", "astronomers found water vapour on a planet",
                          "the rocket lifted off from the launch pad", "engineers fixed a fault on the space station",
                          "the telescope spotted a distant galaxy", "the rover collected rock samples on Mars",
                          "astronauts completed a spacewalk", "a comet will pass close to Earth",
                          "the satellite reached its orbit", "scientists measured radiation from the sun"]),
}
PLACES = ["north", "south", "east", "west", "midlands", "coast", "valley", "highlands", "borders", "islands"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
WRONG = {"weather": "science", "football": "business", "cooking": "news"}
FAILING = {100: ("weather", "football"), 200: ("weather", "football", "cooking"), 300: ("football", "cooking")}
LABELS = sorted({label for label, _ in TOPICS.values()})


def eval_frame(per_topic: int = 48) -> pd.DataFrame:
    rows = []
    rng = np.random.default_rng(7)
    for topic, (label, phrases) in TOPICS.items():
        for i in range(per_topic):
            a, b = rng.choice(len(phrases), 2, replace=False)
            text = (f"On {DAYS[i % len(DAYS)]} in the {PLACES[(i // 7) % len(PLACES)]}, {phrases[a]}, "
                    f"and {phrases[b]}.")
            rows.append({"example_id": f"{topic}-{i:02d}", "text": text, "label": label, "topic": topic})
    return pd.DataFrame(rows)


def predictions_at(frame: pd.DataFrame, step: int, seed: int = 0) -> pd.DataFrame:
    """The planted predictions of `step`: the failing topics' examples wrong, and 4 scattered failures."""
    rng = np.random.default_rng(seed + step)
    pred = frame["label"].to_numpy(dtype=object).copy()
    for topic in FAILING[step]:
        pred[(frame["topic"] == topic).to_numpy()] = WRONG[topic]
    calm = np.flatnonzero(frame["topic"].isin(["markets", "space"]).to_numpy())
    for i in rng.choice(calm, 4, replace=False):
        pred[i] = "lifestyle"
    out = frame.copy()
    out["pred"] = pred
    out["correct"] = out["label"] == out["pred"]
    return out


def trainer_log(step: int) -> dict:
    """The Trainer's state at `step`: loss falling, a learning rate that drops tenfold at step 250."""
    history = []
    for s in range(10, step + 1, 10):
        history.append({"step": s, "epoch": s / 100, "loss": 2.0 * math.exp(-s / 120) + 0.2,
                        "learning_rate": 1e-4 if s < 250 else 1e-5, "grad_norm": 1.0})
        if s % 100 == 0:
            history.append({"step": s, "epoch": s / 100, "eval_loss": 2.1 * math.exp(-s / 120) + 0.3})
    return {"global_step": step, "max_steps": 300, "log_history": history}


def step_run(path: Path, frame: pd.DataFrame, step: int) -> Run:
    """A step run as the callback leaves it, before the stages after inference."""
    frame = frame.copy()
    for column, value in {"confidence": np.float32(0.8), "loss": np.float32(0.3), "n_tokens": np.int32(20),
                          "truncated": False}.items():
        frame[column] = value
    training = {"step": step, "epoch": step / 100, "source": "callback", "experiment": str(path.parent),
                "last": {"loss": trainer_log(step)["log_history"][-2]["loss"]}}
    with create_run(path, overwrite=True, task="classification", labels=LABELS, training=training,
                    data={"path": "eval.jsonl", "rows": len(frame), "metadata_columns": ["topic"]}) as run:
        with run.stage("infer") as staging:
            staging.write_parquet(rundir.PREDICTIONS, frame)
            staging.write_json(rundir.TRAINER_STATE, trainer_log(step))
    return Run.open(path)


def topic_vectors(frame: pd.DataFrame, path: Path, dim: int = 32, noise: float = 0.25, seed: int = 0) -> Path:
    """A precomputed embeddings file (with its example-id sidecar): one direction per topic plus noise, so the
    clustering finds the topics without loading a model."""
    rng = np.random.default_rng(seed)
    centres = {t: rng.normal(size=dim) for t in TOPICS}
    vectors = np.stack([centres[t] / np.linalg.norm(centres[t]) for t in frame["topic"]])
    vectors = (vectors + noise * rng.normal(size=vectors.shape) / np.sqrt(dim)).astype(np.float32)
    np.save(path, vectors)
    path.with_suffix(".json").write_text(json.dumps({"example_ids": frame["example_id"].tolist()}))
    return path


def planted_experiment(root: Path, steps=(100, 200, 300), embedder: str = "file") -> Path:
    """runs/exp with one analyzed run per step (metrics and clusters by the real stages); `embedder` "file" uses
    planted topic vectors (fast), "minilm" the packaged sentence model on the texts."""
    from erroranalysis import stages

    folder = root / "exp"
    frame = eval_frame()
    spec = str(topic_vectors(frame, root / "vectors.npy")) if embedder == "file" else embedder
    cluster = stages.ClusterParams(embedder=spec, reducer="pca", layout="pca", min_cluster_size=20)
    for step in steps:
        run = step_run(folder / f"step-{step:06d}", predictions_at(frame, step), step)
        stages.after_predictions(run, stages.AfterParams(checks=None, slices=None, cluster=cluster))
    return folder


def dump(doc: dict) -> str:
    return json.dumps(doc, indent=1)
