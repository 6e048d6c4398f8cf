"""Contamination and the LLM data checks (issue 25, part 3): n-gram overlap of a generation run's prompts and
references with SFT training rows against a naive set-of-n-grams computation, the normalization of
lm-evaluation-harness, the metrics on clean and contaminated examples, MinHash near-duplicates against exact
Jaccard search on planted near-duplicates, lengths, and bad training files."""

from __future__ import annotations

import json
import random
import string

import numpy as np
import pandas as pd
import pytest
from conftest import write_jsonl
from typer.testing import CliRunner

from erroranalysis.cli.app import app
from erroranalysis.core.errors import DataError
from erroranalysis.datachecks.contamination import chunked, find_contamination, ngrams, normalize, words
from erroranalysis.datachecks.near_duplicates import exact_pairs, groups, minhash_pairs, precision_recall
from erroranalysis.datachecks.train_texts import sft_texts
from erroranalysis.rundir import Run, readers
from erroranalysis.stages.data_checks import CheckParams, checks_run

VOCAB = [f"{a}{b}{c}" for a in "bcdfgklmnprst" for b in "aeiou" for c in "bcdfgklmnprst"]


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choices(VOCAB, k=n))


def naive(eval_texts, train_texts, n=13):
    """The set-of-n-grams computation (what lm-eval's decontamination does, in plain Python): per eval text the
    matched n-grams and the training row sharing most of them."""
    index: dict[tuple, set[int]] = {}
    for row, text in enumerate(train_texts):
        for gram in set(ngrams(text, n)):
            index.setdefault(gram, set()).add(row)
    out = []
    for text in eval_texts:
        grams = set(ngrams(text, n))
        matched = {g for g in grams if g in index}
        counts: dict[int, int] = {}
        for g in matched:
            for row in index[g]:
                counts[row] = counts.get(row, 0) + 1
        best = min(counts, key=lambda r: (-counts[r], r)) if counts else -1
        out.append((len(grams), len(matched), best))
    return out


# -- normalization ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ("Hello, World!", "hello world"),
    ("It's   a\ttab-separated\nline.", "its   a\ttabseparated\nline"),
    ("Q: 2+2=? A: 4.", "q 22 a 4"),
    ("Ünïcode «quotes» stay", "ünïcode «quotes» stay"),  # lm-eval deletes ASCII punctuation only
    ("", ""),
])
def test_normalization_is_lm_eval_harness(text, expected):
    assert normalize(text) == expected
    assert words(text) == expected.split()


def test_normalization_matches_lm_eval_janitor_when_installed():
    janitor = pytest.importorskip("lm_eval.decontamination.janitor")
    jan = janitor.Janitor()
    rng = random.Random(3)
    for _ in range(200):
        text = "".join(rng.choices(string.printable + "éß«»", k=80))
        assert normalize(text) == jan.normalize_string(text)


def test_ngrams_of_short_and_exact_texts():
    assert ngrams("a b c", 3) == [("a", "b", "c")]
    assert ngrams("a b", 3) == []
    assert ngrams("A, b. C d", 2) == [("a", "b"), ("b", "c"), ("c", "d")]


# -- the hashed search against the naive one ------------------------------------------------------------------------


def test_planted_contamination_found_with_its_training_row():
    rng = random.Random(0)
    train = [sentence(rng, rng.randint(5, 60)) for _ in range(3000)]
    evals = [sentence(rng, rng.randint(14, 40)) for _ in range(300)]
    planted = {}
    for i, row in zip(range(0, 300, 10), rng.sample(range(3000), 30)):
        source = train[row].split()
        if len(source) < 20:
            train[row] = source_text = sentence(rng, 30)
            source = source_text.split()
        span = " ".join(source[3:3 + 15])  # 15 words: three 13-grams, cased and punctuated differently
        evals[i] = f"{sentence(rng, 4)} {span.upper()}, {sentence(rng, 5)}!"
        planted[i] = row
    found = find_contamination(evals, chunked(train, 700), n=13)
    assert set(np.flatnonzero(found["contaminated"])) == set(planted)
    for i, row in planted.items():
        assert found.at[i, "train_row"] == row and found.at[i, "shared"] == 3
        assert found.at[i, "matched_ngram"] == " ".join(train[row].split()[3:16])
    clean = found.drop(index=list(planted))
    assert (clean["train_row"] == -1).all() and (clean["n_matched"] == 0).all()
    expected = naive(evals, train)
    assert found["n_ngrams"].tolist() == [e[0] for e in expected]
    assert found["n_matched"].tolist() == [e[1] for e in expected]
    assert found["train_row"].tolist() == [e[2] for e in expected]


def test_short_texts_are_not_checked_and_n_changes_it():
    train = ["one two three four five six seven eight nine ten"]
    evals = ["one two three four five six seven eight", "nothing here at all"]
    thirteen = find_contamination(evals, [train], n=13)
    assert not thirteen["checked"].any() and not thirteen["contaminated"].any()
    eight = find_contamination(evals, [train], n=8)
    assert eight["contaminated"].tolist() == [True, False] and eight["checked"].tolist() == [True, False]
    assert eight.at[0, "overlap"] == 1.0 and np.isnan(eight.at[1, "overlap"])


# -- near duplicates ---------------------------------------------------------------------------------------------


def planted_near_duplicates(n=1500, n_planted=60, seed=1):
    rng = random.Random(seed)
    texts = [sentence(rng, rng.randint(20, 40)) for _ in range(n)]
    for k in range(n_planted):
        i, j = rng.sample(range(n), 2)
        tokens = texts[i].split()
        tokens[rng.randrange(len(tokens))] = rng.choice(VOCAB)  # one word changed: Jaccard about 0.85
        texts[j] = " ".join(tokens)
    return texts


def test_minhash_finds_the_exact_jaccard_pairs():
    texts = planted_near_duplicates()
    truth = exact_pairs(texts, threshold=0.7)
    assert len(truth) >= 50  # the planted pairs (a chain may merge some)
    found = minhash_pairs(texts, threshold=0.7, num_perm=128)
    quality = precision_recall(found, truth)
    assert quality["recall"] >= 0.9 and quality["precision"] >= 0.9, quality
    group = groups(len(texts), found)
    for i, j in zip(found["i"], found["j"]):
        assert group[i] == group[j] >= 0


def test_exact_pairs_is_jaccard_of_word_trigrams():
    texts = ["a b c d e", "a b c d f", "x y z"]
    pairs = exact_pairs(texts, threshold=0.5)
    assert pairs[["i", "j"]].values.tolist() == [[0, 1]] and pairs.at[0, "similarity"] == pytest.approx(2 / 4)


# -- SFT rows ---------------------------------------------------------------------------------------------------------


def test_sft_formats_split_prompt_and_answer():
    frame = pd.DataFrame({"messages": [[{"role": "system", "content": "S"}, {"role": "user", "content": "U"},
                                        {"role": "assistant", "content": "A"}]], "_line": [1]})
    assert sft_texts(frame, "f").iloc[0].tolist() == ["S\nU", "A", "S\nU\nA"]
    frame = pd.DataFrame({"prompt": ["P", "Q"], "completion": ["C", [{"role": "assistant", "content": "D"}]],
                          "_line": [1, 2]})
    assert sft_texts(frame, "f")["text"].tolist() == ["P\nC", "Q\nD"]
    assert sft_texts(pd.DataFrame({"text": ["T"], "_line": [1]}), "f")["prompt"].tolist() == ["T"]
    with pytest.raises(DataError, match=r"f, line 2, column 'messages': message 0 has no \"role\" string"):
        sft_texts(pd.DataFrame({"messages": [[{"role": "user", "content": "x"}], [{"role": 1}]], "_line": [1, 2]}),
                  "f")
    with pytest.raises(DataError, match="no column of a training format .*'body'"):
        sft_texts(pd.DataFrame({"body": ["x"], "_line": [1]}), "f")


# -- the stage on a real generation run ----------------------------------------------------------------------------


def cli(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def generation(tmp_path_factory):
    """A generation run imported with `analyze --task generation` (80 prompts, the first 20 copied from training
    rows 100..119 with their answers; 10 of them also have their reference in training) and an SFT file."""
    root = tmp_path_factory.mktemp("contamination")
    rng = random.Random(5)
    train_rows, outputs = [], []
    for k in range(400):
        question, answer = sentence(rng, rng.randint(16, 30)), sentence(rng, rng.randint(14, 20))
        train_rows.append({"messages": [{"role": "user", "content": question},
                                        {"role": "assistant", "content": answer}]})
    train_rows[7]["messages"][0]["content"] = train_rows[3]["messages"][0]["content"] + " again"  # near duplicate
    for i in range(80):
        if i < 20:
            question = train_rows[100 + i]["messages"][0]["content"]
            reference = train_rows[100 + i]["messages"][1]["content"] if i < 10 else sentence(rng, 15)
        else:
            question, reference = sentence(rng, rng.randint(16, 30)), sentence(rng, 15)
        right = (i < 20) or i % 2 == 0  # contaminated rows all pass, half the clean ones do
        outputs.append({"id": f"q{i}", "prompt": f"Q{i}: {question}?", "reference": reference,
                        "output": reference if right else "something else", "score": 1.0 if right else 0.0})
    train = write_jsonl(root / "sft.jsonl", train_rows)
    data = write_jsonl(root / "outputs.jsonl", outputs)
    made = cli("analyze", "--task", "generation", "--predictions", data, "--out", root / "run", "--id-column",
               "id", "--output-checks", "exact", "--no-data-checks", "--no-cluster", "--no-slices")
    assert made.exit_code == 0, made.output
    return root, train


def test_checks_of_a_generation_run_with_sft_training_data(generation):
    root, train = generation
    summary = checks_run(root / "run", CheckParams(train=str(train), embedder="none"))
    run = Run.open(root / "run")
    table = readers.read_checks(run)
    report = readers.read_checks_report(run)["contamination"]
    preds = readers.read_predictions(run)
    dirty = table["in_train"].to_numpy(dtype=bool)
    assert dirty.tolist() == [i < 20 for i in range(80)]
    assert table["train_row"].iloc[:20].tolist() == list(range(100, 120))
    assert table["train_id"].iloc[:20].tolist() == [str(r) for r in range(100, 120)]
    assert table["contaminated_fields"].iloc[:10].tolist() == ["prompt,reference"] * 10
    assert table["contaminated_fields"].iloc[10:20].tolist() == ["prompt"] * 10
    assert table["train_row"].iloc[20:].isna().all() and table["contaminated_fields"].iloc[20:].isna().all()
    # the metrics split, against pandas on the predictions
    correct = preds["correct"].to_numpy(dtype=bool)
    assert report["metrics"]["contaminated"] == {"n": 20, "pass_rate": correct[:20].mean(),
                                                 "mean_reference_loss": None, "mean_score": 1.0}
    assert report["metrics"]["clean"]["pass_rate"] == pytest.approx(correct[20:].mean())
    assert report["metrics"]["clean"]["mean_score"] == pytest.approx(preds["score"].to_numpy()[20:].mean())
    assert report["fields"]["prompt"]["n_contaminated"] == 20 and report["fields"]["reference"]["n_contaminated"] == 10
    assert report["ngram"] == 13 and report["n_train"] == 400
    assert summary["n_contaminated"] == 20 and summary["pass_rate_contaminated"] == 1.0
    near = report["near_duplicates"]
    assert near["n_groups"] == 1 and near["groups"][0]["train_rows"] == [3, 7]
    assert report["lengths"]["words"]["train"]["n"] == 400 and report["lengths"]["tokens"] is None
    checks = [f["check"] for f in readers.read_checks_report(run)["findings"]]
    assert "contamination" in checks and "train_near_duplicates" in checks


def test_the_command_prints_and_returns_json(generation):
    root, train = generation
    result = cli("data-checks", root / "run", "--train", train, "--check-embedder", "none", "--ngram", "8",
                 "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["n_contaminated"] == 20 and out["ngram"] == 8
    text = cli("data-checks", root / "run", "--train", train, "--check-embedder", "none")
    assert "20 sharing a 13-gram with train" in text.output and "1 near-duplicate groups" in text.output


def test_a_bad_training_file_is_refused_before_the_stage(generation, tmp_path):
    root, _ = generation
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"body": "x"}])
    before = (root / "run" / "checks.json").read_bytes() if (root / "run" / "checks.json").exists() else None
    result = cli("data-checks", root / "run", "--train", bad, "--check-embedder", "none")
    assert result.exit_code == 2 and "no column of a training format" in result.output
    assert "Traceback" not in result.output
    after = (root / "run" / "checks.json").read_bytes() if (root / "run" / "checks.json").exists() else None
    assert before == after
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"messages": [{"role": "user", "content": "a"}]}\n{"messages": "[{"}\n', encoding="utf-8")
    result = cli("data-checks", root / "run", "--train", broken, "--check-embedder", "none")
    assert result.exit_code == 2 and "broken.jsonl, line 2, column 'messages': not valid JSON" in result.output


def test_the_python_api_takes_the_training_file(generation, tmp_path):
    """`ea.analyze(..., task="generation", checks={"train": ...})`: the same check as the command, from the same
    declaration."""
    import erroranalysis as ea

    root, train = generation
    rows = pd.read_json(root / "outputs.jsonl", lines=True)
    run = ea.analyze(rows, task="generation", id="id", out=tmp_path / "api", generation={"output_checks": ("exact",)},
                     checks={"train": str(train), "embedder": "none", "ngram": 13}, slices=None, cluster=None)
    assert run.checks["in_train"].fillna(False).astype(bool).tolist() == [i < 20 for i in range(80)]


def test_lengths_compare_train_and_eval_and_flag_long_prompts():
    from scipy.stats import ks_2samp

    from erroranalysis.datachecks.contamination_report import findings
    from erroranalysis.datachecks.lengths import length_report

    rng = random.Random(2)
    train = [sentence(rng, rng.randint(5, 15)) for _ in range(500)]
    evals = [sentence(rng, rng.randint(5, 15)) for _ in range(90)] + [sentence(rng, 60) for _ in range(10)]
    report = length_report(train, evals, count_tokens=lambda texts: np.array([2 * len(t.split()) for t in texts]),
                           tokenizer="fake")
    words_train = [len(t.split()) for t in train]
    words_eval = [len(t.split()) for t in evals]
    assert report["words"]["train"]["p50"] == np.median(words_train) and report["words"]["eval"]["max"] == 60
    assert report["words"]["ks"] == pytest.approx(ks_2samp(words_train, words_eval).statistic)
    assert report["tokens"]["eval"]["max"] == 120 and report["words"]["eval_above_train_p99"] == pytest.approx(0.1)
    section = {"n_contaminated": 0, "lengths": report, "near_duplicates": None}
    assert [f.check for f in findings(section)] == ["eval_longer_than_train"]
    same = length_report(train, train[:100])
    assert findings({"n_contaminated": 0, "lengths": same}) == []
