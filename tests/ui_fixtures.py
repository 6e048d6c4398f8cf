"""Run directories for the app, labels and export tests and for benchmarks/ui.py, made by the real stages.

`make_run(path, n=400, n_failures=80)` writes what a user brings, an eval set with a model's predictions and
probabilities (`prob_<label>` columns), then runs the stages `erroranalysis analyze` runs on it: load_predictions,
metrics, checks, slices, cluster, the stages' own code. Only what is slow is faked: the embedding model
(`FakeEmbedder`, below) and UMAP (PCA for the reduction and the 2-D layout). The predictions carry planted
structure: failures concentrate on a few confusion pairs whose texts hold the predicted class's words, and forum
posts fail more often. Deterministic given the seed; no model, no network.

`make_generation_run` runs `run_generation` with a tiny random causal LM (built in seconds); `kill_during_stage`
SIGKILLs a real `erroranalysis` process while its stage is running, which leaves the run as a crash leaves it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np

LABELS = ["business", "entertainment", "politics", "sport", "tech"]

_VOCAB = {
    "business": "shares market profit bank economy growth investors deal firm sales quarter prices".split(),
    "entertainment": "film music award star band album actor festival show singer box office".split(),
    "politics": "minister election party government vote labour tory campaign policy parliament".split(),
    "sport": "match cup team coach season injury win league players final goal champion".split(),
    "tech": "software mobile phone internet users broadband game online digital computer virus".split(),
}
_FILLER = "the a of to and in said that for on was is with by it at from has have will year new".split()
_TOPIC = {w: i for i, c in enumerate(LABELS) for w in _VOCAB[c]}


class FakeEmbedder:
    """A deterministic stand-in for the sentence model: a text is the mean of its words' vectors, where a topic
    word lies near its class's direction and any other word is a small vector drawn from its hash. Texts that share
    topic words land close together, as with MiniLM. Called on a list of texts (the checks stage) or of words (the
    slices' word merging); the cluster stage reads its vectors from a file (`embeddings_file`)."""

    __name__ = "fake_topic_words"
    dim = 32

    def __init__(self):
        self._words: dict[str, np.ndarray] = {}

    def _word(self, word: str) -> np.ndarray:
        vec = self._words.get(word)
        if vec is None:
            vec = np.random.default_rng(zlib.crc32(word.encode("utf-8"))).normal(0, 0.3, self.dim)
            if word in _TOPIC:
                vec[_TOPIC[word]] += 3.0
            self._words[word] = vec = vec.astype(np.float32)
        return vec

    def __call__(self, texts) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            words = [w.strip(".,:;!?\"'{}").lower() for w in str(text).split()]
            vecs = [self._word(w) for w in words if w]
            if vecs:
                mean = np.mean(vecs, axis=0)
                out[i] = mean / max(float(np.linalg.norm(mean)), 1e-6)
        return out


FAKE = FakeEmbedder()


def embeddings_file(run_dir: str | Path) -> Path:
    """The fake embedder's vectors of every prediction, saved as users save their own (`--embedder FILE.npy`
    with a FILE.json naming the rows), under the workspace's `.inputs/`. Through a file, apply-taxonomy and the
    Review page re-create the embedder the clustering used."""
    from erroranalysis.rundir import Run

    run_dir = Path(run_dir)
    predictions = Run.open(run_dir).predictions(columns=["example_id", "text"])
    file = run_dir.parent / ".inputs" / f"{run_dir.name}.npy"
    file.parent.mkdir(parents=True, exist_ok=True)
    np.save(file, FAKE(predictions["text"].tolist()))
    file.with_suffix(".json").write_text(json.dumps({"example_ids": predictions["example_id"].astype(str).tolist()}))
    return file


def _texts(rng: np.random.Generator, label_idx, other_idx, n_words) -> list[str]:
    """Texts of n_words words: filler, words of the gold class and, for failures, words of the predicted class."""
    total = int(n_words.sum())
    owner = np.repeat(np.arange(len(n_words)), n_words)
    r = rng.random(total)
    vocab = [np.array(_VOCAB[c], dtype=object) for c in LABELS]
    filler = np.array(_FILLER, dtype=object)
    words = filler[rng.integers(0, len(filler), size=total)]
    own = (r >= 0.25) & (r < 0.45)
    other = (r < 0.25) & (other_idx[owner] >= 0)
    own |= (r < 0.25) & (other_idx[owner] < 0) & (r < 0.1)
    for c in range(len(LABELS)):
        m = own & (label_idx[owner] == c)
        words[m] = vocab[c][rng.integers(0, len(vocab[c]), size=int(m.sum()))]
        m = other & (other_idx[owner] == c)
        words[m] = vocab[c][rng.integers(0, len(vocab[c]), size=int(m.sum()))]
    out = []
    for chunk in np.split(words, np.cumsum(n_words)[:-1]):
        text = " ".join(chunk)
        out.append(text[0].upper() + text[1:] + ".")
    return out


def predictions_frame(*, n: int = 400, n_failures: int = 80, n_clusters: int = 6, seed: int = 0,
                      text_words: tuple[int, int] = (12, 60), temperature: float = 1.0, one_class: bool = False,
                      with_probs: bool = True):
    """What a user brings to `erroranalysis analyze`: id, text, label, pred, prob_<label> (unless with_probs is
    off) and a `source` column. `temperature` > 1 flattens the probabilities (confidences crowd into a few
    calibration bins, as an undertrained model's do); `one_class` makes every gold label the same class."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    k = len(LABELS)
    label_idx = np.full(n, LABELS.index("sport")) if one_class else rng.integers(0, k, size=n)
    fail = np.zeros(n, dtype=bool)
    fail[rng.choice(n, size=n_failures, replace=False)] = True

    # Failures concentrate on a few confusion pairs, as real ones do.
    base_pairs = [(4, 0), (0, 4), (2, 1), (1, 3), (3, 1), (2, 0), (0, 2), (4, 1)]
    if one_class:
        base_pairs = [(label_idx[0], b) for b in range(k) if b != label_idx[0]]
    pairs = [base_pairs[c % len(base_pairs)] for c in range(max(1, n_clusters))]
    pair_of_fail = rng.integers(0, len(pairs), size=n)
    pred_idx = label_idx.copy()
    for i in np.flatnonzero(fail):
        a, b = pairs[pair_of_fail[i]]
        if rng.random() < 0.75:
            label_idx[i], pred_idx[i] = a, b
        else:
            pred_idx[i] = (label_idx[i] + 1 + rng.integers(0, k - 1)) % k

    # Probabilities: the predicted class wins; failures are less confident on average.
    logits = rng.normal(0, 1, size=(n, k))
    boost = np.where(fail, rng.uniform(0.3, 2.5, size=n), rng.uniform(1.5, 5.0, size=n))
    logits[np.arange(n), pred_idx] += boost + np.abs(logits).max(axis=1)
    logits /= temperature
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)

    labels = np.array(LABELS, dtype=object)
    n_words = rng.integers(text_words[0], text_words[1], size=n)
    source = rng.choice(np.array(["wire", "blog", "newsletter", "forum"], dtype=object), size=n,
                        p=[0.5, 0.2, 0.2, 0.1])
    source[fail & (rng.random(n) < 0.3)] = "forum"  # forum posts fail more often: a clear worst slice
    df = pd.DataFrame({"id": [f"ex{i:06d}" for i in range(n)],
                       "text": _texts(rng, label_idx, np.where(fail, pred_idx, -1), n_words),
                       "label": labels[label_idx], "pred": labels[pred_idx], "source": source})
    if with_probs:
        for j, name in enumerate(LABELS):
            df[f"prob_{name}"] = probs[:, j]
    return df


def make_run(path: str | Path, *, n: int = 400, n_failures: int = 80, n_clusters: int = 6, seed: int = 0,
             with_clusters: bool = True, with_checks: bool = True, with_slices: bool = True,
             with_probs: bool = True, text_words: tuple[int, int] = (12, 60), temperature: float = 1.0,
             one_class: bool = False):
    """A run at `path` made by the stages from `predictions_frame(...)`; returns the `Run`."""
    frame = predictions_frame(n=n, n_failures=n_failures, n_clusters=n_clusters, seed=seed, text_words=text_words,
                              temperature=temperature, one_class=one_class, with_probs=with_probs)
    return analyze_frame(path, frame, seed=seed, checks=with_checks, slices=with_slices, cluster=with_clusters)


def analyze_frame(path: str | Path, frame, *, seed: int = 0, checks: bool = True, slices: bool = True,
                  cluster: bool = True):
    """`erroranalysis analyze` on `frame` (id, text, label, pred, optional prob_<label>, metadata), written beside
    the run under `.inputs/` (a hidden folder, which the app does not list), then the stages that follow."""
    from erroranalysis.sources.table import DataOptions
    from erroranalysis.stages import AfterParams, MetricsParams, analyze_predictions

    path = Path(path)
    source = path.parent / ".inputs" / f"{path.name}.parquet"
    source.parent.mkdir(parents=True, exist_ok=True)
    frame.to_parquet(source, index=False)
    run = analyze_predictions(source, path, data_opts=DataOptions(id_column="id"), overwrite=True,
                              after=AfterParams(metrics=MetricsParams(seed=seed), checks=None, slices=None,
                                                cluster=None))
    finish_run(run.path, seed=seed, checks=checks, slices=slices, cluster=cluster)
    return run


def finish_run(run_dir: str | Path, *, seed: int = 0, checks: bool = True, slices: bool = True,
               cluster: bool = True) -> None:
    """The stages after metrics, in `after_predictions`' order, with the fake embedder and PCA."""
    from erroranalysis.stages import checks_run, cluster_run, slices_run

    if checks:
        checks_run(run_dir, embed=FAKE, seed=seed)
    if slices:
        slices_run(run_dir, embed_fn=FAKE)
    if cluster:
        cluster_run(run_dir, seed=seed, embedder=str(embeddings_file(run_dir)), reducer="pca", layout="pca")


def make_generation_run(path: str | Path, model_dir: str | Path, *, n: int = 24, seed: int = 0):
    """A generation run of the causal LM at `model_dir` (see `tiny_causal_lm`) over n JSON-answer prompts,
    then checks, slices and clusters as `erroranalysis run --task generation` runs them."""
    from erroranalysis.infer.generation import GenerationParams
    from erroranalysis.sources.table import DataOptions
    from erroranalysis.stages import AfterParams, MetricsParams, run_generation

    path = Path(path)
    labels = ["business", "sport", "tech"]
    schema = json.dumps({"type": "object", "properties": {"label": {"type": "string", "enum": labels}},
                         "required": ["label"]})
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        label = labels[i % 3]
        words = " ".join(rng.choice(_VOCAB[label], 6))
        rows.append({"id": f"p{i:03d}", "prompt": f"Article: {words}. Label it as JSON.",
                     "reference": json.dumps({"label": label}), "label": label, "schema": schema,
                     "source": "web" if i % 2 else "app"})
    source = path.parent / ".inputs" / f"{path.name}.jsonl"
    source.parent.mkdir(parents=True, exist_ok=True)
    source.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    run = run_generation(model_dir, source, path, data_opts=DataOptions(id_column="id"), overwrite=True,
                         gen_opts=GenerationParams(max_new_tokens=8, batch_size=8, device="cpu"),
                         after=AfterParams(metrics=MetricsParams(seed=seed), checks=None, slices=None, cluster=None))
    finish_run(run.path, seed=seed)
    return run


def tiny_causal_lm(folder: str | Path) -> Path:
    """The tiny random Llama of tests/test_generation.py (2 layers, 32 wide, a trained byte-level BPE)."""
    from test_generation import build_tiny_causal_lm

    return build_tiny_causal_lm(Path(folder))


def kill_during_stage(run_dir: str | Path, command: list[str], stage: str, timeout: float = 180) -> None:
    """Start `erroranalysis <command> RUN` and SIGKILL it as soon as the manifest shows `stage` running: the run is
    left exactly as a crash, an OOM kill or a closed laptop leaves it."""
    from erroranalysis.rundir import MANIFEST

    exe = Path(sys.executable).parent / "erroranalysis"
    proc = subprocess.Popen([str(exe), *command, str(run_dir)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            try:
                stages = json.loads((Path(run_dir) / MANIFEST).read_text(encoding="utf-8")).get("stages", {})
            except (OSError, ValueError):
                stages = {}
            if stages.get(stage, {}).get("status") == "running":
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
                return
            if proc.poll() is not None:
                raise RuntimeError(f"erroranalysis {' '.join(command)} ended (exit {proc.returncode}) before its "
                                   f"stage {stage!r} was seen running: {proc.stderr.read()[-500:]}")
            time.sleep(0.02)
        raise RuntimeError(f"stage {stage!r} was not seen running within {timeout} s")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# The kinds of run the app must show without a traceback (make_kinds); each name says what is unusual about it.
KINDS = ("classification", "flat-calibration", "one-class", "one-label", "no-probabilities", "no-failures",
         "not-clustered", "generation", "interrupted")


def make_kinds(root: str | Path, lm_dir: str | Path, kinds=KINDS) -> dict[str, Path]:
    """One run of each kind under `root` (the generation run with the causal LM at `lm_dir`); {kind: run folder}.

    flat-calibration: probabilities so flat that most of the 15 calibration bins are empty (null in metrics.json),
    as the demo checkpoint's are; one-class: every gold label is `sport` (five labels); one-label: one label in
    all, no failures, no probabilities; no-failures: clustered, and the clustering found nothing to cluster;
    not-clustered: metrics only; interrupted: clustered, then re-clustered by `erroranalysis cluster`, which was
    killed (SIGKILL) while its stage was running."""
    root = Path(root)
    builders = {
        "classification": lambda p: make_run(p, n=400, n_failures=80),
        "flat-calibration": lambda p: make_run(p, n=300, n_failures=90, temperature=8.0, seed=4),
        "one-class": lambda p: make_run(p, n=150, n_failures=40, one_class=True, seed=5),
        "one-label": lambda p: analyze_frame(p, predictions_frame(n=60, n_failures=0, one_class=True,
                                                                  with_probs=False, seed=6)),
        "no-probabilities": lambda p: make_run(p, n=150, n_failures=40, with_probs=False, seed=7),
        "no-failures": lambda p: make_run(p, n=80, n_failures=0, seed=8),
        "not-clustered": lambda p: make_run(p, n=120, n_failures=30, seed=9, with_checks=False,
                                            with_slices=False, with_clusters=False),
        "generation": lambda p: make_generation_run(p, lm_dir),
        "interrupted": lambda p: (make_run(p, n=200, n_failures=40, seed=10),
                                  kill_during_stage(p, ["cluster"], "cluster")),
    }
    for kind in kinds:
        builders[kind](root / kind)
    return {kind: root / kind for kind in kinds}


def make_workspace(root: str | Path, **kwargs) -> Path:
    """A runs folder with two good runs (`news-a`, `news-b`, the second without clusters) and one broken run
    (`broken`, whose predictions.parquet and metrics.json are damaged after the stages wrote them)."""
    from erroranalysis import rundir

    root = Path(root)
    make_run(root / "news-a", **kwargs)
    make_run(root / "news-b", n=200, n_failures=30, seed=1, with_clusters=False)
    broken = make_run(root / "broken", n=60, n_failures=10, seed=2)
    broken.file(rundir.PREDICTIONS).write_bytes(b"not a parquet file")
    broken.file(rundir.METRICS).write_text("{ not json", encoding="utf-8")
    return root


def label_key(run_dir: str | Path) -> str:
    """The key the app's labels database ($ERRORANALYSIS_LABELS_DB, kept apart from the runs in these tests, so
    `<name>@<run id>`) stores the run's labels under."""
    from erroranalysis.labels import run_key
    from erroranalysis.rundir import Run

    return run_key(Run.open(run_dir), Path(os.environ["ERRORANALYSIS_LABELS_DB"]))
