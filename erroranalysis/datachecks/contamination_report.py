"""The contamination section of checks.json for a generation run: which eval examples share an n-gram with the
training data (and with which row), the run's metrics on clean and contaminated examples apart, near-duplicate
training prompts and length distributions; and the plain-language findings over it. Pure functions."""

from __future__ import annotations

import numpy as np
import pandas as pd

from erroranalysis.core import counted
from erroranalysis.core.findings import Finding

CONTAMINATION_SEVERE = 0.01  # as leakage: one eval example in a hundred seen in training is an error
NEAR_DUPLICATE_NOTABLE = 0.05
EXAMPLES = 20


def split_metrics(correct: np.ndarray, contaminated: np.ndarray, reference_loss: np.ndarray | None = None,
                  score: np.ndarray | None = None) -> dict:
    """Pass rate (and mean reference loss and score when given) on all, clean and contaminated examples."""
    return merge_metrics([metric_counts(correct, contaminated, reference_loss, score)])


def metric_counts(correct: np.ndarray, contaminated: np.ndarray, reference_loss: np.ndarray | None = None,
                  score: np.ndarray | None = None) -> dict:
    """`split_metrics`' counts and exact sums over some rows: the partials of any split merge (`merge_metrics`)
    into the answer on all rows, bit for bit (sums are exact fractions, rounded once)."""
    correct = np.asarray(correct, dtype=bool)
    contaminated = np.asarray(contaminated, dtype=bool)
    out = {}
    for part, rows in (("all", np.ones(len(correct), dtype=bool)), ("clean", ~contaminated),
                       ("contaminated", contaminated)):
        counts = {"n": int(rows.sum()), "n_correct": int(correct[rows].sum())}
        for name, values in (("mean_reference_loss", reference_loss), ("mean_score", score)):
            if values is not None:
                kept = np.asarray(values, dtype=np.float64)[rows]
                kept = kept[np.isfinite(kept)]
                counts[name] = (counted.exact_sum(kept), int(kept.size))
        out[part] = counts
    return out


def merge_metrics(parts: list[dict]) -> dict:
    """`split_metrics` from the `metric_counts` of disjoint row sets."""
    from fractions import Fraction

    out = {}
    for part in ("all", "clean", "contaminated"):
        n = sum(p[part]["n"] for p in parts)
        entry = {"n": n, "pass_rate": sum(p[part]["n_correct"] for p in parts) / n if n else None}
        for name in ("mean_reference_loss", "mean_score"):
            if parts and name in parts[0][part]:
                total = sum((p[part][name][0] for p in parts), Fraction(0))
                count = sum(p[part][name][1] for p in parts)
                entry[name] = float(total / count) if count else None
        out[part] = entry
    return out


def contamination_section(fields: dict[str, pd.DataFrame], ids: np.ndarray, train_ids: np.ndarray, n: int,
                          train_path: str, n_train: int, correct: np.ndarray, reference_loss=None, score=None
                          ) -> tuple[dict, dict]:
    """The section and the per-example columns (`in_train`, `train_id`, `train_similarity`, `contaminated_fields`,
    `train_row`) from `find_contamination`'s frames per eval field ("prompt", "reference")."""
    columns = row_columns(fields, len(ids), lambda rows: train_ids[rows])
    section = section_of(field_counts(fields), n, train_path, n_train,
                         split_metrics(correct, columns["in_train"], reference_loss, score),
                         example_candidates(fields, columns, ids, 0))
    return section, {k: v for k, v in columns.items() if not k.startswith("_")}


def row_columns(fields: dict[str, pd.DataFrame], n: int, train_ids_of) -> dict:
    """The per-example columns of `n` eval rows from `find_contamination`'s frames per field (the training row
    sharing most n-grams over the fields, the first field on a tie); `train_ids_of(rows)`: the training rows' ids.
    Keys starting with "_" (best row, overlap, field names) are for `example_candidates`."""
    hit = np.zeros(n, dtype=bool)
    overlap = np.full(n, np.nan)
    best_row = np.full(n, -1, dtype=np.int64)
    best_shared = np.zeros(n, dtype=np.int64)
    names = np.full(n, "", dtype=object)
    for field, found in fields.items():
        flags = found["contaminated"].to_numpy(dtype=bool)
        hit |= flags
        names = np.where(flags, np.where(names == "", field, names + "," + field), names)
        overlap = np.fmax(overlap, found["overlap"].to_numpy(dtype=np.float64))
        better = found["shared"].to_numpy() > best_shared
        best_row = np.where(better, found["train_row"].to_numpy(), best_row)
        best_shared = np.maximum(best_shared, found["shared"].to_numpy())
    train_id = np.full(n, None, dtype=object)
    if hit.any():
        train_id[hit] = np.asarray(train_ids_of(best_row[hit]), dtype=object)
    return {"in_train": hit, "train_row": np.where(hit, best_row, -1), "train_id": train_id,
            "train_similarity": overlap.astype(np.float32), "contaminated_fields": np.where(hit, names, None),
            "_overlap": overlap, "_names": names}


def field_counts(fields: dict[str, pd.DataFrame]) -> dict:
    """Per field: texts checked (at least n words), contaminated, too short. Sums over blocks."""
    return {field: {"n_checked": int(found["checked"].sum()), "n_contaminated": int(found["contaminated"].sum()),
                    "n_too_short": int((~found["checked"]).sum())} for field, found in fields.items()}


def example_candidates(fields: dict[str, pd.DataFrame], columns: dict, ids: np.ndarray, first_row: int,
                       limit: int = EXAMPLES) -> list[dict]:
    """The `limit` contaminated examples of these rows with the highest overlap (ties: the earlier row), each with
    its row in the whole set (`_row`, rows starting at `first_row`): the best of every block's are the best of all
    (`top_examples`)."""
    hit, overlap, names = columns["in_train"], columns["_overlap"], columns["_names"]
    order = np.flatnonzero(hit)
    order = order[np.argsort(-overlap[order], kind="stable")][:limit]
    out = []
    for i in order:
        found = fields[names[i].split(",")[0]]
        out.append({"example_id": str(ids[i]), "fields": str(names[i]), "train_row": int(columns["train_row"][i]),
                    "train_id": str(columns["train_id"][i]), "overlap": float(overlap[i]),
                    "matched_ngram": str(found["matched_ngram"].iat[i]), "_row": first_row + int(i)})
    return out


def top_examples(candidates: list[dict], limit: int = EXAMPLES) -> list[dict]:
    ranked = sorted(candidates, key=lambda e: (-e["overlap"], e["_row"]))[:limit]
    return [{k: v for k, v in e.items() if k != "_row"} for e in ranked]


def section_of(per_field: dict, n: int, train_path: str, n_train: int, metrics: dict, candidates: list[dict]
               ) -> dict:
    """The "contamination" section (without ngram, near_duplicates, lengths, which the stage adds)."""
    n_hit = metrics["contaminated"]["n"]
    return {"ngram": None, "train_path": train_path, "n_train": n_train, "n_examples": n,
            "n_contaminated": n_hit, "share_contaminated": n_hit / n if n else 0.0,
            "fields": per_field, "metrics": metrics, "examples": top_examples(candidates)}


def near_duplicate_section(prompts, pairs: pd.DataFrame, group: np.ndarray, train_ids: np.ndarray,
                           threshold: float, num_perm: int, limit: int = EXAMPLES) -> dict:
    """`prompts` and `train_ids`: anything indexed by training row (lists, arrays, or readers of scratch shards)."""
    in_groups = group >= 0
    n_groups = int(group.max() + 1) if in_groups.any() else 0
    shown = []
    for g in range(min(n_groups, limit)):
        rows = np.flatnonzero(group == g)
        shown.append({"group": g, "size": int(rows.size), "train_rows": [int(r) for r in rows[:10]],
                      "train_ids": [str(train_ids[r]) for r in rows[:10]], "prompt": str(prompts[rows[0]])[:300]})
    return {"method": "minhash_lsh", "threshold": threshold, "num_perm": num_perm, "n_train": len(prompts),
            "n_pairs": len(pairs), "n_groups": n_groups, "n_rows_in_groups": int(in_groups.sum()),
            "n_redundant": int(in_groups.sum() - n_groups),
            "share_redundant": float((in_groups.sum() - n_groups) / max(len(prompts), 1)), "groups": shown}


def findings(section: dict) -> list[Finding]:
    """Findings over a contamination section (contamination, near-duplicate training prompts, lengths)."""
    out: list[Finding] = []
    n_hit = section["n_contaminated"]
    if n_hit:
        metrics = section["metrics"]
        clean, dirty = metrics["clean"], metrics["contaminated"]
        rates = ""
        if dirty["pass_rate"] is not None:
            rates = (f"; pass rate {dirty['pass_rate']:.1%} on them against "
                     + (f"{clean['pass_rate']:.1%} on the {clean['n']} clean ones" if clean["pass_rate"] is not None
                        else "no clean example"))
        out.append(Finding(
            "contamination", "error" if section["share_contaminated"] >= CONTAMINATION_SEVERE else "warning", (),
            f"{n_hit} eval examples ({section['share_contaminated']:.1%}) share a {section['ngram']}-gram with "
            f"the training data{rates}",
            "Scores on these examples may measure memory: report the clean-subset metrics beside the overall ones, "
            "or drop the examples (or their training rows: checks.parquet's train_row) and evaluate again."))
    near = section.get("near_duplicates")
    if near and near["n_redundant"]:
        out.append(Finding(
            "train_near_duplicates", "warning" if near["share_redundant"] >= NEAR_DUPLICATE_NOTABLE else "info", (),
            f"{near['n_rows_in_groups']} training prompts fall in {near['n_groups']} near-duplicate groups (Jaccard "
            f">= {near['threshold']} on word 3-grams): {near['n_redundant']} ({near['share_redundant']:.1%}) are "
            "redundant copies",
            "Duplicated prompts weigh more in the loss than the mixture intends: deduplicate, or keep one row per "
            "group (checks.json lists the groups' training rows)."))
    out.extend(_length_findings(section.get("lengths")))
    return out


def _length_findings(lengths: dict | None) -> list[Finding]:
    from erroranalysis.datachecks.lengths import KS_NOTABLE, LONGER_NOTABLE

    if not lengths:
        return []
    unit, found = ("tokens", lengths["tokens"]) if lengths.get("tokens") else ("words", lengths["words"])
    if not found or found["ks"] is None:
        return []
    out = []
    if found["eval_above_train_p99"] >= LONGER_NOTABLE:
        out.append(Finding(
            "eval_longer_than_train", "warning", (),
            f"{found['eval_above_train_p99']:.1%} of eval prompts are longer than 99% of training prompts "
            f"(over {found['train']['p99']:.0f} {unit})",
            "The model rarely saw inputs this long in training: read the failures among the long prompts, and add "
            "long examples to training or check the truncation length."))
    if found["ks"] >= KS_NOTABLE and found["p_value"] < 0.01:
        out.append(Finding(
            "length_shift", "info", (),
            f"eval and training prompt lengths differ (KS {found['ks']:.2f}; median {found['eval']['p50']:.0f} "
            f"against {found['train']['p50']:.0f} {unit})",
            "A shift in length often comes with a shift in task: compare the failures' lengths with the training "
            "data's."))
    return out
