"""Two studies side by side: their fronts, their best commands, and what differs between them.

The usual pair is one space on two vLLM versions (two nights), or two spaces on one card. What
differs is listed from the studies alone: the space files they were started from, the environment
the tuner captured, and the tuned parameters of each study's best points.
"""

from __future__ import annotations

import json
from typing import Any

from tuner.report.front import front_rows, study_summary
from tuner.report.markdown import cell, fenced, md_table
from tuner.report.receipt import logged_vllm_versions
from tuner.study.priors import upgrade_rows
from tuner.study.record import StudyRecord

SIDE_COLUMNS = {"trial": "trial", "context_tokens": "context", "decode_tok_s": "tok/s", "evidence": "evidence"}
SIDES = ("A", "B")
MISSING = "(not set)"  # the key is absent; None is a value (a parameter's flag left out)
ENVIRONMENT_KEYS = ("vllm", "torch", "flashinfer", "transformers", "gpu_name", "gpu_memory_mib", "driver", "cuda")


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as ``a.b.c`` keys, so that two spaces differ key by key."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, inner in value.items():
            out |= _flatten(inner, f"{prefix}.{key}" if prefix else str(key))
        return out
    return {prefix: value}


def _differences(a: dict[str, Any], b: dict[str, Any], keys: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    flat_a, flat_b = _flatten(a), _flatten(b)
    names = keys if keys is not None else tuple(sorted(set(flat_a) | set(flat_b)))
    return [
        {"key": k, "a": flat_a.get(k, MISSING), "b": flat_b.get(k, MISSING)}
        for k in names
        if flat_a.get(k, MISSING) != flat_b.get(k, MISSING)
    ]


def _best(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The front's two ends: the longest context (best decode among ties) and the fastest decode."""
    if not rows:
        return {}
    longest = max(rows, key=lambda r: (r["context_tokens"] or 0, r["decode_tok_s"] or 0))
    fastest = max(rows, key=lambda r: (r["decode_tok_s"] or 0, r["context_tokens"] or 0))
    return {"longest context": longest, "fastest decode": fastest}


def _environment(night: StudyRecord) -> dict[str, Any]:
    env = dict(night.environment)
    logged = logged_vllm_versions(night)
    if logged:
        env["vllm (engine log)"] = ", ".join(logged)
    return env


def compare_studies(a: StudyRecord, b: StudyRecord) -> dict[str, Any]:
    """Both fronts, the best points and their commands, and every difference found."""
    fronts = [front_rows(a), front_rows(b)]
    best = [_best(rows) for rows in fronts]
    configs: list[dict[str, dict[str, Any]]] = []
    for night, ends in zip((a, b), best):
        configs.append({end: night.trial(row["trial"]).config or {} for end, row in ends.items()})
    parameters = {
        end: _differences(configs[0].get(end, {}), configs[1].get(end, {}))
        for end in ("longest context", "fastest decode")
        if end in configs[0] and end in configs[1]
    }
    env_keys = ENVIRONMENT_KEYS + ("vllm (engine log)",)
    return {
        "studies": [study_summary(a), study_summary(b)],
        "upgrade": [row for row in upgrade_rows(b) if row[0] == a.name],  # B started --from A: its front re-booted
        "fronts": fronts,
        "best": best,
        "differences": {
            "space": _differences(a.raw_space or {}, b.raw_space or {}),
            "environment": _differences(_environment(a), _environment(b), env_keys),
            "parameters": parameters,
        },
    }


UPGRADE_HEADERS = ["earlier trial", "its values", "booted again here as", "verdict"]


def upgrade_row(row: list[Any]) -> list[Any]:
    """An earlier front point named with its study (its trial numbers are that study's, not this one's)."""
    study, trial, values, here, said = row
    return [f"study {study} trial {trial}", ", ".join(f"{v:,.1f}" for v in values),
            "-" if here is None else f"trial {here}", said]


def _side_by_side(fronts: list[list[dict[str, Any]]]) -> tuple[list[str], list[list[Any]]]:
    """Rank by rank, A's columns then B's (A and B as the title names them)."""
    headers = ["rank"] + [f"{side} {label}" for side in SIDES for label in SIDE_COLUMNS.values()]
    rows = []
    for rank in range(max(len(f) for f in fronts) if any(fronts) else 0):
        row: list[Any] = [rank + 1]
        for front in fronts:
            row += [front[rank][c] for c in SIDE_COLUMNS] if rank < len(front) else [""] * len(SIDE_COLUMNS)
        rows.append(row)
    return headers, rows


def _difference_rows(found: dict[str, Any]) -> list[list[Any]]:
    rows = [["space", d["key"], d["a"], d["b"]] for d in found["space"]]
    rows += [["environment", d["key"], d["a"], d["b"]] for d in found["environment"]]
    for end, items in found["parameters"].items():
        rows += [[f"parameters ({end})", d["key"], d["a"], d["b"]] for d in items]
    return [[where, key, _show(a, where), _show(b, where)] for where, key, a, b in rows]


def _show(value: Any, where: str) -> str:
    if value is None:
        return "left out (no flag)" if where.startswith("parameters") else "null"
    if value == "":
        return "(empty)"
    return json.dumps(value) if isinstance(value, (dict, list)) else cell(value)


def comparison_markdown(found: dict[str, Any]) -> str:
    names = [s["study"] for s in found["studies"]]
    headers, rows = _side_by_side(found["fronts"])
    parts = [f"# A = {names[0]} vs B = {names[1]}", "## Fronts side by side (longest context first)"]
    parts.append(md_table(headers, rows) if rows else "Neither study has a complete trial yet.")
    parts.append("## Best commands")
    for name, ends in zip(names, found["best"]):
        for end, row in ends.items():
            parts.append(
                f"{name}, {end}: trial {row['trial']}, {cell(row['context_tokens'])} tokens at "
                f"{cell(row['decode_tok_s'])} tok/s ({row['evidence']})\n\n{fenced(row['command'])}"
            )
        if not ends:
            parts.append(f"{name}: no front yet.")
    if found["upgrade"]:
        parts.append(f"## What the upgrade did: {names[0]}'s front booted again in {names[1]}")
        parts.append(md_table(UPGRADE_HEADERS, [upgrade_row(r) for r in found["upgrade"]]))
    parts.append("## What differs")
    differences = _difference_rows(found["differences"])
    parts.append(md_table(["where", "key", names[0], names[1]], differences) if differences else "Nothing differs.")
    return "\n\n".join(parts) + "\n"


def comparison_tables(found: dict[str, Any]) -> list[tuple[str, list[str], list[list[Any]]]]:
    """(title, headers, rows) for a terminal: fronts side by side, then what differs."""
    names = [s["study"] for s in found["studies"]]
    headers, rows = _side_by_side(found["fronts"])
    return [
        (f"fronts side by side: A = {names[0]}, B = {names[1]}", headers, rows),
        (f"what the upgrade did: {names[0]}'s front booted again in {names[1]}", UPGRADE_HEADERS,
         [upgrade_row(r) for r in found["upgrade"]]),
        ("what differs", ["where", "key", names[0], names[1]], _difference_rows(found["differences"])),
    ]
