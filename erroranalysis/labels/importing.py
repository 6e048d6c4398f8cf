"""Import a taxonomy's error types into a labels store: validated first, idempotent, with a choice on clashes,
parents created before their sub-types, all of it in one transaction logged as one event.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from erroranalysis.core.errors import DataError, UserError
from erroranalysis.core.validation import check_param
from erroranalysis.labels.fields import display_name, fold_name

ON_CLASH = ("reuse", "update", "fail")


def load_taxonomy(source: str | Path | dict, name: str | None = None) -> dict:
    """A taxonomy export (path or already-parsed dict) checked for format, schema version, schema and unknown
    fields. Raises DataError naming the file and the first offending place."""
    from erroranalysis.labels import taxonomy

    if isinstance(source, dict):
        doc, where = source, name or "taxonomy"
        taxonomy.validate(doc, where)
    else:
        where = name or str(source)
        if Path(source).is_dir():
            raise DataError(f"{source}: is a directory; pass the taxonomy JSON file "
                            "('erroranalysis export RUN --format json' writes one).")
        doc = taxonomy.load(source)
    version = doc["schema_version"]
    unknown = unknown_fields(doc, taxonomy.json_schema(version))
    if unknown:
        raise DataError(f"{where}: unknown field {unknown[0]!r} (not in taxonomy schema_version "
                        f"{version}); export it again with this version of erroranalysis, or remove the field.")
    return doc


def unknown_fields(doc: Any, schema: dict, path: str = "") -> list[str]:
    """Paths (`run/embedder`, `error_types/0/color`) of keys that `schema` does not name, depth first."""
    found: list[str] = []
    props: dict = {}
    parts = schema.get("allOf", []) + [schema]
    for part in parts:
        props.update(part.get("properties", {}))
    free = any(isinstance(p.get("additionalProperties"), dict) for p in parts)
    if isinstance(doc, dict):
        for key, value in doc.items():
            sub = f"{path}/{key}" if path else str(key)
            if key in props:
                found += unknown_fields(value, props[key], sub)
            elif props and not free:
                found.append(sub)
    elif isinstance(doc, list):
        items = next((p["items"] for p in parts if isinstance(p.get("items"), dict)), None)
        if items is not None:
            for i, value in enumerate(doc):
                found += unknown_fields(value, items, f"{path}/{i}")
    return found


@dataclass
class ImportResult:
    created: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    clashes: list[dict] = field(default_factory=list)  # {name, existing, field, ours, theirs}
    type_ids: dict[str, int] = field(default_factory=dict)  # taxonomy name -> id in the store

    def summary(self) -> str:
        parts = [f"{len(self.created)} created", f"{len(self.reused)} already there"]
        if self.updated:
            parts.append(f"{len(self.updated)} updated")
        return ", ".join(parts)


def _clash_fields(existing, wanted: dict, store) -> list[tuple[str, str, str]]:
    out = []
    for key in ("definition", "severity"):
        ours, theirs = getattr(existing, key), wanted[key]
        if (ours or "") != (theirs or ""):
            out.append((key, ours, theirs))
    if "parent" in wanted:  # version 1 taxonomies say nothing about parents
        ours = store.error_type(existing.parent_id).name if existing.parent_id is not None else None
        if fold_name(ours or "") != fold_name(wanted["parent"] or ""):
            out.append(("parent", ours, wanted["parent"]))
    if existing.name != wanted["name"]:
        out.append(("name", existing.name, wanted["name"]))
    return out


def _parents_first(types: list[dict]) -> list[dict]:
    """The document's error types ordered so each parent comes before its sub-types (validated: no cycles)."""
    by_key = {fold_name(t["name"]): t for t in types}
    done: dict[str, dict] = {}
    for t in types:
        chain = []  # t and its ancestors not placed yet, walked up without recursion
        while t is not None and fold_name(t["name"]) not in done and t not in chain:
            chain.append(t)
            parent = t.get("parent")
            t = by_key.get(fold_name(parent)) if parent else None
        for item in reversed(chain):
            done[fold_name(item["name"])] = item
    return list(done.values())


def plan_import(doc: dict, store, *, on_clash: str = "reuse") -> list[dict]:
    """What importing would do, per error type (parents first): {name, action (create/reuse/update), existing,
    differences, wanted}. Raises UserError with on_clash='fail' when a name exists with another definition,
    severity or parent."""
    check_param("on_clash", on_clash, on_clash in ON_CLASH, "one of " + ", ".join(ON_CLASH))
    existing = {fold_name(t.name): t for t in store.error_types()}
    plan, seen = [], set()
    for et in doc.get("error_types", []):
        key = fold_name(et["name"])
        if key in seen:
            raise DataError(f"taxonomy: error type {display_name(et['name'])!r} appears twice (names are compared "
                            "ignoring case); merge them in the source workspace and export again.")
        seen.add(key)
    for et in _parents_first(doc.get("error_types", [])):
        name = display_name(et["name"])
        wanted = {"name": name, "definition": et.get("definition") or "", "severity": et.get("severity") or "medium"}
        if doc.get("schema_version", 1) >= 2:
            wanted["parent"] = display_name(et["parent"]) if et.get("parent") else None
        have = existing.get(fold_name(name))
        if have is None:
            plan.append({"name": name, "action": "create", "existing": None, "differences": [], "wanted": wanted})
            continue
        diffs = _clash_fields(have, wanted, store)
        meaningful = [d for d in diffs if d[0] != "name"]
        if meaningful and on_clash == "fail":
            f, ours, theirs = meaningful[0]
            raise UserError(f"error type {name!r} exists in {store.path} with another {f} ({_short(ours)!r} here, "
                            f"{_short(theirs)!r} in the taxonomy); pass --on-clash reuse to keep this workspace's, "
                            "or --on-clash update to take the taxonomy's.")
        action = "update" if meaningful and on_clash == "update" else "reuse"
        plan.append({"name": name, "action": action, "existing": have, "differences": diffs, "wanted": wanted})
    return plan


def import_taxonomy(taxonomy: str | Path | dict, store, *, on_clash: str = "reuse") -> ImportResult:
    """Create the taxonomy's error types in `store` (a LabelStore), parents before their sub-types, in one
    transaction logged as one event (or as part of the store's batch, when it is one). Idempotent: a type whose
    name exists already (compared ignoring case) is reused (on_clash='reuse', keeping this workspace's
    definition, severity and parent), updated to the taxonomy's ('update'), or refused before anything is written
    ('fail')."""
    doc = load_taxonomy(taxonomy) if not isinstance(taxonomy, dict) else taxonomy
    result = ImportResult()
    with store.batch(action="import_taxonomy") as b:
        for item in plan_import(doc, b, on_clash=on_clash):
            _import_one(b, item, result)
        if len(result.created) + len(result.updated) > 3:
            b.summary = f"imported a taxonomy: {result.summary()}"
    return result


def _import_one(store, item: dict, result: ImportResult) -> None:
    wanted = item["wanted"]
    for f, ours, theirs in item["differences"]:
        result.clashes.append({"name": wanted["name"], "existing": item["existing"].name, "field": f,
                               "ours": ours, "theirs": theirs})
    parent = wanted.get("parent")
    if item["action"] == "create":
        created = store.create_error_type(wanted["name"], wanted["definition"], wanted["severity"], parent=parent)
        result.created.append(created.name)
        result.type_ids[wanted["name"]] = created.id
    elif item["action"] == "update":
        extra = {"parent": parent} if "parent" in wanted else {}
        updated = store.update_error_type(item["existing"].id, definition=wanted["definition"],
                                          severity=wanted["severity"], **extra)
        result.updated.append(updated.name)
        result.type_ids[wanted["name"]] = updated.id
    else:
        result.reused.append(item["existing"].name)
        result.type_ids[wanted["name"]] = item["existing"].id


def _short(text: Any, limit: int = 40) -> str:
    s = " ".join(str(text or "").split())
    return s if len(s) <= limit else s[: limit - 1] + "…"
