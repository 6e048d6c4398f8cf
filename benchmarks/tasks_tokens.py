"""Inference speed of the token-classification and seq2seq heads beside what a user would otherwise run, over the
same model and inputs, in one process, one after the other:

- token classification: erroranalysis' word predictions (`infer.tokens.encode` + `predict`, length-sorted batches
  of 32, first sub-token) beside transformers' `pipeline("token-classification", aggregation_strategy="none")`
  (batch 32) on the sample checkpoint's encoder (6-layer, 384-wide MiniLM) with a fresh 9-tag NER head; agreement:
  the share of words given the same tag (the pipeline's tag of the word's first sub-token);
- seq2seq: erroranalysis' generation (`infer.generation.generate` on an encoder-decoder, greedy, batch 16) beside
  `model.generate(..., do_sample=False, num_beams=1)` over the same batches (transformers 5 has no
  "text2text-generation" pipeline any more), on a randomly initialized T5-small-sized model (6+6 layers, 512 wide,
  the tokenizer trained on the corpus); agreement: identical output token ids.

Prints examples/s of each, the ratio and the load average (the machine is shared: read the ratio, not the speed).

    .venv/bin/python benchmarks/tasks_tokens.py [--n 1000] [--gen-n 96] [--max-new-tokens 24]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from common import SAMPLE, corpus_sentences, load_average, sample_checkpoint, table

NER_TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "B-MISC", "I-MISC"]


def ner_head(base: Path, folder: Path) -> Path:
    import torch
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    torch.manual_seed(0)
    model = AutoModelForTokenClassification.from_pretrained(
        base, num_labels=len(NER_TAGS), id2label=dict(enumerate(NER_TAGS)),
        label2id={t: i for i, t in enumerate(NER_TAGS)}, ignore_mismatched_sizes=True)
    model.save_pretrained(folder, safe_serialization=True)
    AutoTokenizer.from_pretrained(base).save_pretrained(folder)
    return folder


def tokens_ours(model: Path, sentences: list[list[str]]) -> tuple[float, list[list[str]]]:
    from erroranalysis.infer.tokens import encode, load_token_classifier, predict

    clf = load_token_classifier(model, device="cpu", precision="fp32")
    start = time.perf_counter()
    outs = predict(clf, encode(clf.tokenizer, sentences, 128), None, batch_size=32)
    return time.perf_counter() - start, [[clf.labels[k] for k in o["pred"]] for o in outs]


def tokens_peer(model: Path, sentences: list[list[str]]) -> tuple[float, list[list[str]]]:
    from transformers import pipeline

    tag = pipeline("token-classification", model=str(model), device="cpu", aggregation_strategy="none",
                   ignore_labels=[])
    texts = [" ".join(s) for s in sentences]
    start = time.perf_counter()
    results = tag(texts, batch_size=32)
    seconds = time.perf_counter() - start
    tags = []
    for words, found in zip(sentences, results):
        by_start = {}
        for entry in found:
            by_start.setdefault(entry["start"], entry["entity"])
        offset, row = 0, []
        for w in words:
            row.append(by_start.get(offset, "?"))
            offset += len(w) + 1
        tags.append(row)
    return seconds, tags


def t5_small(folder: Path, corpus: list[str]) -> Path:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast, T5Config, T5ForConditionalGeneration

    torch.manual_seed(0)
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<pad>", "</s>", "<unk>"]
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=8000, special_tokens=specials,
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                        show_progress=False))
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", eos_token="</s>")
    config = T5Config(vocab_size=len(tokenizer), d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_heads=8,
                      pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
    T5ForConditionalGeneration(config).save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return folder


def seq2seq_pair(model: Path, prompts: list[str], max_new_tokens: int) -> tuple[float, float, float]:
    """(ours s, generate s, share of identical outputs)."""
    import torch

    from erroranalysis.infer.causal_lm import load_causal_lm
    from erroranalysis.infer.generation import GenerationParams, encode_prompts, generate

    lm = load_causal_lm(model, device="cpu", precision="fp32")
    ids, _, _ = encode_prompts(lm, prompts, [False] * len(prompts), 256)
    opts = GenerationParams(max_new_tokens=max_new_tokens, batch_size=16)
    generate(lm, ids[:16], opts)  # warm-up
    start = time.perf_counter()
    ours = generate(lm, ids, opts)["output_ids"]
    ours_s = time.perf_counter() - start
    order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))  # the same batches as ours
    theirs: list = [None] * len(ids)
    start = time.perf_counter()
    for b in range(0, len(order), 16):
        rows = order[b:b + 16]
        enc = lm.tokenizer.pad({"input_ids": [ids[i] for i in rows]}, return_tensors="pt")
        with torch.inference_mode():
            out = lm.model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False, num_beams=1)
        for r, i in enumerate(rows):
            seq = out[r, 1:].tolist()
            seq = seq[:seq.index(1)] if 1 in seq else seq
            theirs[i] = seq
    peer_s = time.perf_counter() - start
    same = sum(a == b for a, b in zip(ours, theirs)) / len(ids)
    return ours_s, peer_s, same


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000, help="sentences for token classification")
    parser.add_argument("--gen-n", type=int, default=96, help="prompts for seq2seq")
    parser.add_argument("--max-new-tokens", type=int, default=24)
    args = parser.parse_args()
    import torch

    corpus = corpus_sentences()
    sentences = [s.split()[:60] for s in (corpus * 2)[:args.n] if s.split()]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        base = SAMPLE / "checkpoint" if (SAMPLE / "checkpoint" / "config.json").is_file() else sample_checkpoint()
        ner = ner_head(base, Path(tmp) / "ner")
        tokens_ours(ner, sentences[:32])  # warm-up
        a_s, a = tokens_ours(ner, sentences)
        b_s, b = tokens_peer(ner, sentences)
        words = sum(len(s) for s in a)
        agree = sum(x == y for s, t in zip(a, b) for x, y in zip(s, t)) / max(words, 1)
        rows.append(["token-classification", f"{len(sentences) / a_s:.0f}", f"{len(sentences) / b_s:.0f}",
                     f"{b_s / a_s:.2f}x", f"{agree:.1%} of words"])
        t5 = t5_small(Path(tmp) / "t5", corpus[:2000])
        prompts = [f"summarize: {s}" for s in corpus[:args.gen_n]]
        o_s, p_s, same = seq2seq_pair(t5, prompts, args.max_new_tokens)
        rows.append(["seq2seq (T5-small size)", f"{len(prompts) / o_s:.1f}", f"{len(prompts) / p_s:.1f}",
                     f"{p_s / o_s:.2f}x", f"{same:.1%} identical"])
        shutil.rmtree(tmp, ignore_errors=True)
    print(table(rows, ["head", "ours ex/s", "peer ex/s", "speed-up", "agreement"]))
    print(f"peers: pipeline('token-classification'); model.generate (greedy). fp32, {torch.get_num_threads()} torch "
          f"threads, {load_average()}")
    print(json.dumps({"n_sentences": len(sentences), "n_prompts": len(prompts)}))


if __name__ == "__main__":
    main()
