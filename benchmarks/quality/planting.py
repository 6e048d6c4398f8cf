"""Planted error types: which examples a simulated model fails on, and how.

Mechanisms (each planted group has one):

- `topic`: a sub-topic (oil, rugby, video games, ...), a rule over many topic words; in long documents a document
  with at least 3 hits, in sentences a sentence with one, in titles a title whose article has 3 (a title rarely
  names its topic's words, so the group is semantic);
- `concept`: a concept mentioned inside texts about other topics, a set of 1 to 12 words with their inflections
  and synonyms (the weather: weather, rain, snow, storms, cold, winds, ...); in documents 2 hits (1 for a
  one-word concept), elsewhere 1; spread over the classes;
- `mixed`: a concept failing in two directions: its texts of two classes are each read as the other;
- `metadata`: one value of the `source` column, alone or with one class (nothing in the text says so);
- `length`: the longest texts (above a percentile drawn between 92 and 97).

A group's members fail at the scenario's fail rate; a topic or concept fails toward one wrong class (80% of the
time) or toward random ones. Outside the groups, background failures (5% to 30% of the other examples) fall where
a TF-IDF logistic regression is unsure and mostly go to the class it confuses (a real model's scattered errors),
and label noise flips given labels (the model then predicts the true class).

Scenarios are drawn from pools of definitions with a seed; a third of the definitions and every third scenario
are held out: the held-out scenarios (which use the held-out definitions) are never looked at while choosing
defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

# name: regex on the lower-cased text
TOPICS = {
    "video games": r"\b(video ?games?|gamers?|gaming|consoles?|playstation|xbox|nintendo)\b",
    "oil": r"\b(oil|crude|opec|barrels?)\b",
    "rugby": r"\brugby\b",
    "china": r"\b(china|chinese|beijing)\b",
    "piracy": r"\b(piracy|pirates?|pirated|file-sharing|peer-to-peer|p2p|copyright)\b",
    "immigration": r"\b(immigration|asylum|immigrants?|migrants?)\b",
    "athletics": r"\b(athletics|athletes?|olympics?|marathon|sprint(er)?|indoor)\b",
    "computer security": r"\b(virus|viruses|hackers?|spam|phishing|malicious|spyware)\b",
    "airlines": r"\b(airlines?|aviation|airports?|flights?)\b",
    "tennis": r"\b(tennis|wimbledon|federer|roddick|henman|davenport)\b",
    "film awards": r"\b(oscars?|bafta|academy awards?|nominations?|nominated)\b",
    "broadband": r"\b(broadband|internet)\b",
    "stock market": r"\b(shares|stock market|investors?|stocks?)\b",
    # held out
    "mobile phones": r"\b(mobiles?|phones?|handsets?)\b",
    "tax": r"\b(tax|taxes|taxation)\b",
    "iraq": r"\b(iraq|iraqi)\b",
    "eu": r"\b(eu|european union|brussels)\b",
    "football clubs": r"\b(chelsea|arsenal|liverpool|manchester united|premiership)\b",
    "music": r"\b(albums?|singers?|band|chart|songs?)\b",
}
CONCEPTS = {
    "weather": r"\b(weather|rain|raining|snow|storms?|cold|winds?|temperatures?|floods?|sunshine)\b",
    "christmas": r"\b(christmas|festive|xmas|holiday season)\b",
    "women": r"\b(women|woman|female)\b",
    "charity": r"\b(charity|charities|donations?|aid)\b",
    "family": r"\b(family|families|wife|husband|mother|father|daughter|son)\b",
    "police": r"\b(police|arrested|crime|criminals?)\b",
    "education": r"\b(schools?|students?|universit(?:y|ies)|education|teachers?)\b",
    "military": r"\b(war|military|soldiers?|army|troops)\b",
    "cars": r"\b(cars?|vehicles?|motorists?|driving|drivers?)\b",
    "japan": r"\b(japan|japanese|tokyo)\b",
    "france": r"\b(france|french|paris)\b",
    "injury": r"\b(injury|injured|injuries|hamstring|ankle|knee)\b",
    # held out
    "children": r"\b(children|child|kids|parents)\b",
    "death": r"\b(died|death|dead|killed)\b",
    "tsunami": r"\btsunami\b",
    "health": r"\b(health|hospital|doctors?|patients?|nhs|medical)\b",
    "scotland": r"\b(scotland|scottish|glasgow|edinburgh)\b",
    "india": r"\b(india|indian)\b",
    "youth": r"\b(young|youth|teenagers?|teenage)\b",
}
HELD_OUT_DEFINITIONS = {"mobile phones", "tax", "iraq", "eu", "football clubs", "music", "children", "death",
                        "tsunami", "health", "scotland", "india", "youth"}
METADATA_VALUES = ("partner", "legacy", "import")  # 10%, 6%, 4% of rows
MIN_FAILURES = 12  # a group must give at least this many failures to be planted
MAX_SHARE = 0.08  # and hold at most this share of the corpus


@dataclass
class Group:
    name: str
    mechanism: str  # topic | concept | mixed | metadata | length
    rule: str = ""  # regex, metadata value or percentile
    mode: str = "random"  # a wrong class, "random", or "swap" (mixed)
    classes: tuple = ()  # mixed: the two classes read as each other


@dataclass
class Scenario:
    corpus: str
    index: int
    groups: list[Group]
    background: float
    fail_rate: float
    label_noise: float
    seed: int
    held_out: bool
    notes: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.corpus}-{self.index:02d}"


def members(frame: pd.DataFrame, corpus: str, group: Group) -> np.ndarray:
    """Boolean mask of the group's members in the corpus."""
    if group.mechanism == "metadata":
        value, _, cls = group.rule.partition("|")
        return ((frame["source"] == value) & ((frame["label"] == cls) if cls else True)).to_numpy()
    if group.mechanism == "length":
        return (frame["n_words"] >= np.percentile(frame["n_words"], float(group.rule))).to_numpy()
    text = frame["text"].str.lower()
    if group.mechanism == "topic":
        if corpus == "titles":
            return (frame["article"].str.lower().str.count(group.rule) >= 3).to_numpy()
        return (text.str.count(group.rule) >= (3 if corpus == "docs" else 1)).to_numpy()
    one_word = "|" not in group.rule
    hits = 2 if corpus == "docs" and not one_word else 1
    mask = (text.str.count(group.rule) >= hits).to_numpy()
    if group.mechanism == "mixed":
        mask = mask & frame["label"].isin(group.classes).to_numpy()
    return mask


def scenarios(corpus: str, frame: pd.DataFrame, count: int, seed: int = 0) -> list[Scenario]:
    """`count` scenarios for the corpus, every third held out; deterministic given the seed."""
    rng = np.random.default_rng([seed, {"docs": 11, "sentences": 12, "titles": 13}[corpus]])
    out = []
    for index in range(count):
        held_out = index % 3 == 2
        background = float(rng.choice([0.05, 0.10, 0.20, 0.30]))
        fail_rate = float(rng.choice([0.6, 0.75, 0.9]))
        label_noise = float(rng.choice([0.0, 0.03]))
        groups = _draw_groups(rng, frame, corpus, fail_rate, held_out)
        out.append(Scenario(corpus, index, groups, background, fail_rate, label_noise,
                            seed=int(rng.integers(0, 2**31)), held_out=held_out))
    return out


def _draw_groups(rng, frame: pd.DataFrame, corpus: str, fail_rate: float, held_out: bool) -> list[Group]:
    """1-2 topics, 1-2 concepts, maybe a concept failing both ways, a metadata value and the longest texts; each
    big enough to give `MIN_FAILURES` failures outside the groups drawn before it, none over `MAX_SHARE`."""
    labels = sorted(frame["label"].unique())
    taken = np.zeros(len(frame), dtype=bool)
    groups: list[Group] = []

    def add(group: Group) -> None:
        mask = members(frame, corpus, group)
        free = mask & ~taken
        if any(g.name == group.name for g in groups) or fail_rate * free.sum() < MIN_FAILURES or \
                free.mean() > MAX_SHARE:
            return
        groups.append(group)
        taken[mask] = True

    def pool(definitions: dict) -> list[str]:
        tuned = [n for n in definitions if n not in HELD_OUT_DEFINITIONS]
        # held-out scenarios draw from the held-out definitions first, then from the tuned ones
        first = [n for n in definitions if n in HELD_OUT_DEFINITIONS] if held_out else tuned
        later = tuned if held_out else []
        return [str(n) for n in rng.permutation(first)] + [str(n) for n in rng.permutation(later)]

    def mode() -> str:
        return str(rng.choice(labels)) if rng.random() < 0.5 else "random"

    def count(mechanism: str) -> int:
        return sum(g.mechanism == mechanism for g in groups)

    wanted = {"topic": int(rng.integers(1, 3)), "concept": int(rng.integers(1, 3)), "mixed": int(rng.random() < 0.5),
              "metadata": int(rng.random() < 0.35), "length": int(rng.random() < 0.25)}
    for name in pool(TOPICS):
        if count("topic") >= wanted["topic"]:
            break
        add(Group(name, "topic", TOPICS[name], mode()))
    concepts = pool(CONCEPTS)
    for name in concepts:
        if count("concept") >= wanted["concept"]:
            break
        add(Group(name, "concept", CONCEPTS[name], mode()))
    for name in concepts:
        if count("mixed") >= wanted["mixed"]:
            break
        present = frame.loc[members(frame, corpus, Group(name, "concept", CONCEPTS[name])), "label"]
        two = tuple(present.value_counts().index[:2])
        if len(two) == 2:
            add(Group(f"{name} ({two[0]} <-> {two[1]})", "mixed", CONCEPTS[name], "swap", two))
    if wanted["metadata"]:
        value = str(rng.choice(METADATA_VALUES))
        if rng.random() < 0.5:  # one source's texts of one class
            cls = str(rng.choice(labels))
            add(Group(f"source = {value} and label = {cls}", "metadata", f"{value}|{cls}", mode()))
        else:
            add(Group(f"source = {value}", "metadata", value, mode()))
    if wanted["length"]:
        q = int(rng.integers(92, 98))
        add(Group(f"longest {100 - q}%", "length", str(q), "random"))
    return groups


def plant(frame: pd.DataFrame, corpus: str, scenario: Scenario, hardness: np.ndarray,
          consistency: float = 0.8) -> pd.DataFrame:
    """The corpus with `label` (given, after label noise), `true_label`, `pred`, `correct` and `planted` (group
    index; -1 background failure; -3 a failure from label noise; -2 correct)."""
    rng = np.random.default_rng(scenario.seed)
    labels = np.array(sorted(frame["label"].unique()), dtype=object)
    gold = frame["label"].to_numpy(dtype=object)
    n = len(frame)
    group = np.full(n, -1)
    for g, spec in enumerate(scenario.groups):
        mask = members(frame, corpus, spec)
        group[(group == -1) & mask] = g  # a text in two groups belongs to the first
    pred = gold.copy()
    planted = np.full(n, -2)
    for g, spec in enumerate(scenario.groups):
        rows = np.flatnonzero(group == g)
        fail = rows[rng.random(len(rows)) < scenario.fail_rate]
        for i in fail:
            wrong = labels[labels != gold[i]]
            if spec.mode == "swap":
                a, b = spec.classes
                pred[i] = b if gold[i] == a else a
            elif spec.mode != "random" and spec.mode != gold[i] and rng.random() < consistency:
                pred[i] = spec.mode
            else:
                pred[i] = rng.choice(wrong)
        planted[fail] = g
    # background failures where a real classifier is unsure, mostly toward the class it confuses
    rest = np.flatnonzero(group == -1)
    true_col = np.searchsorted(labels, gold)
    p_true = hardness[np.arange(n), true_col]
    weight = (1.0 - p_true[rest]) + 0.05
    k = int(round(scenario.background * len(rest)))
    chosen = rng.choice(rest, size=k, replace=False, p=weight / weight.sum())
    for i in chosen:
        ranked = labels[np.argsort(-hardness[i])]
        confused = next(c for c in ranked if c != gold[i])
        pred[i] = confused if rng.random() < 0.7 else rng.choice(labels[labels != gold[i]])
    planted[chosen] = -1
    # label noise: the given label is wrong, the model predicts the true class
    given = gold.copy()
    clean = np.setdiff1d(rest, chosen)
    flips = rng.choice(clean, size=int(round(scenario.label_noise * n)), replace=False)
    for i in flips:
        given[i] = rng.choice(labels[labels != gold[i]])
    planted[flips] = -3
    out = frame.copy()
    out["true_label"] = gold
    out["label"] = given
    out["pred"] = pred
    out["correct"] = out["pred"] == out["label"]
    out["planted"] = planted
    return out
