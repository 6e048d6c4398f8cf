"""The contamination checks of a generation run with a training file on Ray workers give the in-process answers: a
run imported by `analyze --task generation` with planted contaminated prompts and references (and one n-gram in
more training rows than `MAX_TRAIN_ROWS_PER_NGRAM`), checked with `engine=None` and on a local Ray with small
blocks. Per-row columns, the counts, the clean/contaminated metrics, the examples, near duplicates and lengths are
equal (a run built at an s3:// URL on a cluster whose second node cannot see the driver's disk: tests/test_ray_cluster.py).
The pieces (the hash join, the LSH bands grouped by key, exact sums) are checked on random splits against the whole."""

from __future__ import annotations

import random
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from conftest import write_jsonl
from typer.testing import CliRunner

from erroranalysis.cli.app import app
from erroranalysis.core import counted
from erroranalysis.core.errors import DataError
from erroranalysis.datachecks import contamination_blocks as cb
from erroranalysis.datachecks import contamination_report as report
from erroranalysis.datachecks.contamination import MAX_TRAIN_ROWS_PER_NGRAM, find_contamination
from erroranalysis.engines import Engine
from erroranalysis.rundir import Run, readers
from erroranalysis.stages.data_checks import CheckParams, checks_run

VOCAB = [f"{a}{b}{c}" for a in "bcdfgklmnprst" for b in "aeiou" for c in "bcdfgklmnprst"]
BOILERPLATE = "answer the question below using only the facts given in the passage please"  # 13 words


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choices(VOCAB, k=n))


@pytest.fixture(scope="module")
def generation(tmp_path_factory):
    return planted_generation(tmp_path_factory.mktemp("contamination_ray"))


def planted_generation(root):
    """A generation run of 90 prompts (0..19 copied from training rows 100..119, 0..9 with their answers as
    references; 20..24 start with a 13-gram found in 40 training rows) and its SFT file as JSONL and Parquet, in
    `root`: (root, the JSONL file)."""
    rng = random.Random(7)
    rows, outputs = [], []
    for k in range(300):
        question, answer = sentence(rng, rng.randint(16, 30)), sentence(rng, rng.randint(14, 20))
        if 200 <= k < 240:
            question = f"{BOILERPLATE} {question}"
        rows.append({"id": f"t{k}", "messages": [{"role": "user", "content": question},
                                                 {"role": "assistant", "content": answer}]})
    rows[7]["messages"][0]["content"] = rows[3]["messages"][0]["content"] + " again"  # near duplicates
    for a, b in ((20, 290), (21, 150), (150, 260)):  # across blocks, and a group of three
        rows[b]["messages"][0]["content"] = rows[a]["messages"][0]["content"] + " too"
    for i in range(90):
        if i < 20:
            question = rows[100 + i]["messages"][0]["content"]
            reference = rows[100 + i]["messages"][1]["content"] if i < 10 else sentence(rng, 15)
        elif i < 25:
            question, reference = f"{BOILERPLATE} {sentence(rng, 10)}", sentence(rng, 15)
        else:
            question, reference = sentence(rng, rng.randint(8, 30)), sentence(rng, 15)
        right = i % 3 != 0
        outputs.append({"id": f"q{i}", "prompt": f"Q{i}: {question}?", "reference": reference,
                        "output": reference if right else "something else", "score": float(right) * 0.75})
    train = write_jsonl(root / "sft.jsonl", rows)
    pd.DataFrame(rows).to_parquet(root / "sft.parquet", index=False)
    made = CliRunner().invoke(app, [str(a) for a in (
        "analyze", "--task", "generation", "--predictions", write_jsonl(root / "outputs.jsonl", outputs), "--out",
        root / "run", "--id-column", "id", "--output-checks", "exact", "--no-data-checks", "--no-cluster",
        "--no-slices")])
    assert made.exit_code == 0, made.output
    return root, train


def checked(run_path, engine, **params):
    checks_run(run_path, CheckParams(embedder="none", **params), engine=engine)
    run = Run.open(run_path)
    return readers.read_checks(run), readers.read_checks_report(run)


def both(run_path, monkeypatch, **params):
    frame, found = checked(run_path, None, **params)
    monkeypatch.setattr("erroranalysis.engines.blocks.ROWS_PER_BLOCK", 32)
    ray_frame, ray_found = checked(run_path, Engine(engine="ray"), **params)
    return (frame, found), (ray_frame, ray_found)


@pytest.mark.parametrize("train_file, id_column", [("sft.jsonl", None), ("sft.parquet", "id")])
def test_ray_contamination_equals_the_in_process_one(local_ray, generation, monkeypatch, train_file, id_column):
    root, _ = generation
    (frame, found), (ray_frame, ray_found) = both(root / "run", monkeypatch, train=str(root / train_file),
                                                  train_id_column=id_column)
    pd.testing.assert_frame_equal(frame, ray_frame)
    assert ray_found["params"].pop("engine") == "ray" and ray_found["params"].pop("sample") is None
    assert found["params"] == ray_found["params"]
    assert found["contamination"] == ray_found["contamination"]
    assert found["findings"] == ray_found["findings"] and found.keys() == ray_found.keys()
    # the planted rows, so that the equality above is over something found
    dirty = frame["in_train"].to_numpy(dtype=bool)
    assert dirty.tolist() == [i < 25 for i in range(90)]
    assert frame["train_row"].iloc[:20].tolist() == list(range(100, 120))
    assert frame["train_row"].iloc[20:25].tolist() == [200] * 5  # the first of the boilerplate's 40 rows
    assert frame["train_id"].iloc[0] == ("t100" if id_column else "100")
    section = found["contamination"]
    assert section["fields"]["reference"]["n_contaminated"] == 10
    groups = [g["train_rows"] for g in section["near_duplicates"]["groups"]]
    assert groups == [[3, 7], [20, 290], [21, 150, 260]] and section["lengths"]["words"]["eval"]["n"] == 90


def test_token_lengths_with_the_run_s_tokenizer_are_equal(local_ray, generation, tiny_checkpoint, tmp_path,
                                                          monkeypatch):
    """A run whose model folder has a tokenizer (the tiny checkpoint's, named in a copy of the run's manifest):
    token lengths too, the eval side from the blocks' histograms."""
    import json
    import shutil

    root, train = generation
    run_path = shutil.copytree(root / "run", tmp_path / "run")
    manifest = json.loads((run_path / "manifest.json").read_text())
    manifest["model"] = {"path": str(tiny_checkpoint)}
    (run_path / "manifest.json").write_text(json.dumps(manifest))
    (_, found), (_, ray_found) = both(run_path, monkeypatch, train=str(train))
    lengths = found["contamination"]["lengths"]
    assert lengths["tokens"]["eval"]["n"] == 90 and lengths["tokenizer"] == str(tiny_checkpoint)
    assert lengths == ray_found["contamination"]["lengths"]


def test_a_bad_training_file_is_the_same_error_under_both_engines(local_ray, generation, tmp_path, monkeypatch):
    root, _ = generation
    monkeypatch.setattr("erroranalysis.engines.blocks.ROWS_PER_BLOCK", 16)
    rows = [{"messages": [{"role": "user", "content": f"q {i}"}, {"role": "assistant", "content": "a"}]}
            for i in range(40)]
    rows[33]["messages"] = [{"role": 1, "content": "x"}]
    bad = write_jsonl(tmp_path / "bad.jsonl", rows)
    report = root / "run" / "checks.json"
    before = report.read_bytes() if report.exists() else None
    errors = []
    for engine in (None, Engine(engine="ray")):
        with pytest.raises(DataError) as caught:
            checks_run(root / "run", CheckParams(train=str(bad), embedder="none"), engine=engine)
        errors.append(str(caught.value))
    assert errors[0] == errors[1] and "bad.jsonl, line 34, column 'messages'" in errors[0]
    result = CliRunner().invoke(app, [str(a) for a in ("data-checks", root / "run", "--train", bad,
                                                       "--check-embedder", "none", "--engine", "ray")])
    assert result.exit_code == 2 and errors[0] in result.output and "Traceback" not in result.output
    assert (report.read_bytes() if report.exists() else None) == before  # nothing half-written
    assert not list((root / "run").glob(".contamination-scratch-*"))


# -- the pieces ------------------------------------------------------------------------------------------------


def test_the_hash_join_over_any_split_is_find_contamination():
    rng = random.Random(3)
    train = [sentence(rng, rng.randint(3, 25)) for _ in range(120)]
    train += [f"{BOILERPLATE} {sentence(rng, 4)}" for _ in range(MAX_TRAIN_ROWS_PER_NGRAM + 8)]
    long = [i for i, t in enumerate(train) if len(t.split()) >= 13]
    evals = [train[i] for i in (long[1], long[30], 130)] + [f"{BOILERPLATE} x"] + [sentence(rng, 20) for _ in range(6)]
    whole = find_contamination(evals, [train], n=13)
    from erroranalysis.datachecks.contamination import from_matches

    for seed in range(3):
        cuts = sorted(random.Random(seed).sample(range(1, len(train)), 4))
        starts = [0, *cuts]
        pairs = [cb.train_pairs(train[a:b], a, 13) for a, b in zip(starts, [*cuts, len(train)])]
        n_parts = seed + 2
        hashes = np.concatenate([h for h, _ in pairs])
        rows = np.concatenate([r for _, r in pairs])
        wanted = cb.eval_hashes([evals], 13)
        got = [cb.match(wanted[cb.part_of(wanted, n_parts) == p], hashes[cb.part_of(hashes, n_parts) == p],
                        rows[cb.part_of(hashes, n_parts) == p]) for p in range(n_parts)]
        matched = pd.DataFrame({"hash": np.concatenate([h for h, _ in got]),
                                "train_row": np.concatenate([r for _, r in got])})
        pd.testing.assert_frame_equal(from_matches(evals, matched, 13), whole)
    assert whole["contaminated"].tolist()[:4] == [True] * 4


def test_lsh_bands_grouped_by_key_partition_are_minhash_pairs():
    from erroranalysis.datachecks import near_duplicates as nd

    rng = random.Random(1)
    texts = [sentence(rng, 20) for _ in range(300)]
    for a in range(0, 60, 3):
        texts[a + 1], texts[a + 2] = texts[a] + " again", " ".join(texts[a].split()[:-1])
    texts[5] = ""
    whole = nd.minhash_pairs(texts, 0.8, 128, seed=1)
    ranges = nd.band_ranges(0.8, 128)
    for size, n_parts in ((37, 3), (100, 5)):
        keys = pd.concat([nd.band_keys(texts[s:s + size], s, ranges, 128, seed=1) for s in range(0, 300, size)])
        part = keys["key"].map(lambda k: k[0]) % n_parts
        pairs = pd.concat([nd.candidate_pairs(keys[part == p]) for p in range(n_parts)]).drop_duplicates()
        pd.testing.assert_frame_equal(nd.verified(pairs, lambda r: texts[r], 0.8), whole)
    assert len(whole) >= 40


def test_exact_sums_and_merged_metrics_over_any_split():
    rng = np.random.default_rng(1)
    values = np.concatenate([rng.normal(0, 1e6, 500), rng.normal(0, 1e-9, 500), [0.0, -0.0, 5e-324, np.pi]])
    assert counted.exact_sum(values) == sum(map(Fraction, values.tolist()))
    correct = rng.random(300) < 0.6
    dirty = rng.random(300) < 0.2
    loss = rng.exponential(1, 300)
    loss[::17] = np.nan
    whole = report.split_metrics(correct, dirty, loss, None)
    for seed in range(3):
        cuts = np.sort(np.random.default_rng(seed).choice(np.arange(1, 300), 5, replace=False))
        parts = [report.metric_counts(c, d, lo) for c, d, lo in zip(np.split(correct, cuts), np.split(dirty, cuts),
                                                                   np.split(loss, cuts))]
        assert report.merge_metrics(parts) == whole
    kept = loss[dirty & np.isfinite(loss)]
    assert whole["contaminated"]["mean_reference_loss"] == float(sum(map(Fraction, kept.tolist())) / len(kept))
    assert whole["clean"]["pass_rate"] == correct[~dirty].mean() and "mean_score" not in whole["all"]


def test_length_histograms_over_any_split_give_the_length_report():
    from erroranalysis.datachecks import lengths

    rng = random.Random(2)
    train = [sentence(rng, rng.randint(0, 40)) for _ in range(150)]
    evals = [sentence(rng, rng.randint(0, 60)) for _ in range(200)]
    whole = lengths.length_report(train, evals)
    for seed in range(3):
        cuts = sorted(random.Random(seed).sample(range(1, 200), 6))
        counts: dict = {}
        for a, b in zip([0, *cuts], [*cuts, 200]):
            for k, v in lengths.histogram(lengths.word_counts(evals[a:b])).items():
                counts[k] = counts.get(k, 0) + v
        got = lengths.counts_report(lengths.word_counts(train), lengths.from_histogram(counts))
        assert got == whole


def test_sample_rows_is_every_row_up_to_the_size():
    assert cb.sample_rows(5, 10, 0).tolist() == [0, 1, 2, 3, 4]
    picked = cb.sample_rows(1000, 10, 4)
    assert len(set(picked.tolist())) == 10 and (np.diff(picked) > 0).all()
    assert picked.tolist() == cb.sample_rows(1000, 10, 4).tolist()
