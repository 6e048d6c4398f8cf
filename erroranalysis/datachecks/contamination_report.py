"""The contamination section of checks.json for a generation run: which eval examples share an n-gram with the
training data (and with which row), the run's metrics on clean and contaminated examples apart, near-duplicate
training prompts and length distributions; and the plain-language findings over it. Pure functions."""

from __future__ import annotations

import numpy as np
import pandas as pd

from erroranalysis.core.findings import Finding

CONTAMINATION_SEVERE = 0.01  # as leakage: one eval example in a hundred seen in training is an error
NEAR_DUPLICATE_NOTABLE = 0.05
EXAMPLES = 20


def split_metrics(correct: np.ndarray, contaminated: np.ndarray, reference_loss: np.ndarray | None = None,
                  score: np.ndarray | None = None) -> dict:
    """Pass rate (and mean reference loss and score when given) on all, clean and contaminated examples."""
    correct = np.asarray(correct, dtype=bool)
    contaminated = np.asarray(contaminated, dtype=bool)

    def part(rows: np.ndarray) -> dict:
        out = {"n": int(rows.sum()), "pass_rate": float(correct[rows].mean()) if rows.any() else None}
        for name, values in (("mean_reference_loss", reference_loss), ("mean_score", score)):
            if values is not None:
                kept = np.asarray(values, dtype=np.float64)[rows]
                kept = kept[np.isfinite(kept)]
                out[name] = float(kept.mean()) if kept.size else None
        return out

    every = np.ones(len(correct), dtype=bool)
    return {"all": part(every), "clean": part(~contaminated), "contaminated": part(contaminated)}


def contamination_section(fields: dict[str, pd.DataFrame], ids: np.ndarray, train_ids: np.ndarray, n: int,
                          train_path: str, n_train: int, correct: np.ndarray, reference_loss=None, score=None
                          ) -> tuple[dict, dict]:
    """The section and the per-example columns (`in_train`, `train_id`, `train_similarity`, `contaminated_fields`,
    `train_row`) from `find_contamination`'s frames per eval field ("prompt", "reference")."""
    hit = np.zeros(len(ids), dtype=bool)
    overlap = np.full(len(ids), np.nan)
    best_row = np.full(len(ids), -1, dtype=np.int64)
    best_shared = np.zeros(len(ids), dtype=np.int64)
    names = np.full(len(ids), "", dtype=object)
    per_field = {}
    for field, found in fields.items():
        flags = found["contaminated"].to_numpy(dtype=bool)
        hit |= flags
        names = np.where(flags, np.where(names == "", field, names + "," + field), names)
        overlap = np.fmax(overlap, found["overlap"].to_numpy(dtype=np.float64))
        better = found["shared"].to_numpy() > best_shared
        best_row = np.where(better, found["train_row"].to_numpy(), best_row)
        best_shared = np.maximum(best_shared, found["shared"].to_numpy())
        per_field[field] = {"n_checked": int(found["checked"].sum()), "n_contaminated": int(flags.sum()),
                            "n_too_short": int((~found["checked"]).sum())}
    columns = {"in_train": hit, "train_row": np.where(hit, best_row, -1),
               "train_id": np.where(hit, train_ids[np.maximum(best_row, 0)], None),
               "train_similarity": overlap.astype(np.float32),
               "contaminated_fields": np.where(hit, names, None)}
    order = np.flatnonzero(hit)
    order = order[np.argsort(-overlap[order], kind="stable")][:EXAMPLES]
    examples = []
    for i in order:
        field = names[i].split(",")[0]
        found = fields[field]
        examples.append({"example_id": str(ids[i]), "fields": str(names[i]), "train_row": int(best_row[i]),
                         "train_id": str(train_ids[best_row[i]]), "overlap": float(overlap[i]),
                         "matched_ngram": str(found["matched_ngram"].iat[i])})
    section = {"ngram": None, "train_path": train_path, "n_train": n_train, "n_examples": n,
               "n_contaminated": int(hit.sum()), "share_contaminated": float(hit.mean()) if n else 0.0,
               "fields": per_field, "metrics": split_metrics(correct, hit, reference_loss, score),
               "examples": examples}
    return section, columns


def near_duplicate_section(prompts, pairs: pd.DataFrame, group: np.ndarray, train_ids: np.ndarray,
                           threshold: float, num_perm: int, limit: int = EXAMPLES) -> dict:
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
