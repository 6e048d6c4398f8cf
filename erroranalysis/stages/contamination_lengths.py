"""The train/eval lengths of a generation run's contamination checks under `--engine ray` (`contamination_ray`):
each training block writes its rows of the seeded length sample (`LENGTH_SAMPLE`, the in-process one), each
predictions block sends back its prompts' length histograms (words, and tokens with the run's tokenizer), and one
task compares them: eval lengths from histograms are the same distribution, so the same quantiles and KS test."""

from __future__ import annotations

import functools

import numpy as np

from erroranalysis.datachecks import contamination_blocks as cb
from erroranalysis.engines import blocks as eb
from erroranalysis.stages.contamination_scratch import at, read, write


def write_sample(scratch: str, block, prompts: list[str], length_rows: np.ndarray) -> None:
    """A training block's prompts among the seeded length sample `length_rows`, for `lengths`."""
    import pyarrow as pa

    mine = cb.within(length_rows, block.start, block.stop) - block.start
    if mine.size:
        write(at(scratch, "train_lengths"), eb.SHARD.format(start=block.start),
              pa.table({"prompt": [prompts[i] for i in mine]}))


def histograms(prompts: list[str], model: str | None) -> dict:
    """A predictions block's prompts' length histograms: words, and tokens with the tokenizer of `model` (else None)."""
    from erroranalysis.datachecks.lengths import histogram, word_counts

    count, _ = _token_counter(model)
    return {"words": histogram(word_counts(prompts)),
            "tokens": histogram(count(prompts)) if count is not None else None}


def added(a: dict | None, b: dict | None) -> dict | None:
    """Two histograms (value -> count) summed; None when both are None."""
    if a is None or b is None:
        return a if b is None else b
    return {k: a.get(k, 0) + b.get(k, 0) for k in a.keys() | b.keys()}


def lengths(scratch: str, model: str | None, eval_lengths: dict, **_) -> dict:
    """The length comparison: the training sample's prompts against every eval prompt's lengths (the blocks'
    histograms: the same distribution, so the same quantiles and KS test)."""
    from erroranalysis.datachecks.lengths import counts_report, from_histogram, word_counts

    train = read(at(scratch, "train_lengths"))
    prompts = train.column("prompt").to_pylist() if train is not None else []
    count, tokenizer = _token_counter(model)
    tokens = eval_lengths["tokens"]
    out = counts_report(word_counts(prompts), from_histogram(eval_lengths["words"]),
                        np.asarray(count(prompts)) if count is not None else None,
                        from_histogram(tokens) if count is not None and tokens is not None else None, tokenizer)
    out["n_train_measured"] = len(prompts)
    return out


@functools.lru_cache(maxsize=1)
def _token_counter(model: str | None):
    from erroranalysis.stages.contamination import token_counter

    return token_counter(model)  # once per worker process: the tokenizer loads once
