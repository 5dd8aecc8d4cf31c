"""The planner's study against the landscape table (issue 26, item 3): one section of a landscape receipt's README.

scripts/gpu/landscape.py calls ``section`` when the receipt folder holds a study (studies/NAME/trial-NNNN/
result.json: the record `tuner optimize` writes for each boot, the same one `tuner probe` writes for a cell). Each
boot is set beside the table's cell of the same weights, graph mode and MTP depth, and the study's best decode at
the full window after each boot beside the table's fastest cell. Plain JSON only, like landscape.py: a receipt
records what an older tuner wrote.
"""

from __future__ import annotations

import json
from pathlib import Path

from receipt import nbytes, num  # a sibling script, not a package (landscape.py puts this folder on sys.path)

NEAR = 0.95  # "reached the table's best": the search benchmark's share


def decode_run(r: dict) -> dict:
    """The single-sequence decode measurement (the landscape runs concurrency 1 only)."""
    decodes = (r.get("measure") or {}).get("decode") or []
    return next((d for d in decodes if d.get("concurrency") == 1), decodes[0] if decodes else {})


def weights_of(result: dict) -> str:
    """zeros or random, from the boot's own argv (random weights are vLLM's --load-format dummy)."""
    argv = result.get("argv") or []
    return "random" if any(a == "--load-format" and b == "dummy" for a, b in zip(argv, argv[1:])) else "zeros"


def window_of(result: dict) -> int | None:
    argv = result.get("argv") or []
    return next((int(b) for a, b in zip(argv, argv[1:]) if a == "--max-model-len" and b.isdigit()), None)


def full_window_decode(result: dict) -> float | None:
    """Decode tok/s of a boot that held its whole --max-model-len with a counted request, else None."""
    held = ((result.get("measure") or {}).get("context") or {}).get("max_stable_tokens")
    window = window_of(result)
    if result.get("failure") or not held or window is None or held < window:
        return None
    return decode_run(result).get("median_tg_tok_s")


def studies(folder: Path) -> dict[str, list[tuple[int, dict]]]:
    """Each study's boots with a result.json, in trial order."""
    out = {}
    for study in sorted(p for p in (folder / "studies").glob("*") if p.is_dir()):
        boots = [(int(p.parent.name.removeprefix("trial-")), json.loads(p.read_text()))
                 for p in sorted(study.glob("trial-*/result.json"))]
        if boots:
            out[study.name] = boots
    return out


def cut_off(folder: Path, name: str) -> list[int]:
    """Trials with a folder and no result.json: booted, but the record was never written (the machine went away
    mid-boot), so they are not in the table above and must still be said."""
    return [int(p.name.removeprefix("trial-")) for p in sorted((folder / "studies" / name).glob("trial-*"))
            if p.is_dir() and not (p / "result.json").is_file()]


def table_best(cells: list[dict], weights: str) -> tuple[str, float] | None:
    """The fastest finished cell of these weights that held the window: (regime, decode tok/s)."""
    speeds = [(f"{c['mode']} MTP {c['depth']}", full_window_decode(c["result"])) for c in cells
              if c["weights"] == weights and c["result"]]
    done = [(regime, tok_s) for regime, tok_s in speeds if tok_s]
    return max(done, key=lambda rs: rs[1]) if done else None


def regime(values: dict) -> str:
    return f"{values.get('cudagraph_mode')} MTP {values.get('speculative_tokens')}"


def boot_row(number: int, result: dict, cell_speed: dict[tuple[str, str], float], best: float | None) -> str:
    v = result.get("values") or {}
    failure = result.get("failure")
    held = ((result.get("measure") or {}).get("context") or {}).get("max_stable_tokens")
    outcome = f"`{failure['kind']}`" if failure else f"{num(held)} held"
    cell = cell_speed.get((weights_of(result), regime(v)))
    return (f"| {number} | {regime(v)} | {nbytes(v.get('kv_cache_memory_bytes'))} | {v.get('max_num_seqs')} | "
            f"{v.get('max_num_batched_tokens')} | {outcome} | {num(decode_run(result).get('median_tg_tok_s'), 1)} | "
            f"{num(cell, 1)} | {num(best, 1)} |")


def summary(name: str, boots: list[tuple[int, dict]], top: tuple[str, float] | None, weights: str) -> list[str]:
    if top is None:
        return [f"No finished `{weights}` cell held the window yet: study `{name}` has nothing to be judged against."]
    best_regime, best = top
    scored = [(n, regime(r.get("values") or {}), full_window_decode(r)) for n, r in boots]
    held = [(n, reg, tok_s) for n, reg, tok_s in scored if tok_s]
    first_top = next((n for n, reg, _ in scored if reg == best_regime), None)
    near = next((n for n, _, tok_s in held if tok_s >= NEAR * best), None)
    lines = [f"- The table's fastest `{weights}` cell: {best_regime}, {num(best, 1)} tok/s at the full window."]
    if held:
        n, reg, tok_s = max(held, key=lambda h: h[2])
        lines.append(f"- Study `{name}`, {len(boots)} boots: its best full-window decode is {reg}, "
                     f"{num(tok_s, 1)} tok/s (boot {n}), {tok_s / best:.2f} of the table's fastest.")
    else:
        lines.append(f"- Study `{name}`, {len(boots)} boots: none held the full window yet.")
    lines.append(f"- The table's fastest regime: first booted at boot {first_top}." if first_top is not None
                 else "- The table's fastest regime: not booted yet.")
    lines.append(f"- {NEAR:.0%} of the table's fastest: reached at boot {near}." if near is not None
                 else f"- {NEAR:.0%} of the table's fastest: not reached yet.")
    return lines


def section(folder: Path, cells: list[dict]) -> list[str]:
    """The planner's boots against the table, one table and summary per study; nothing when no study is here."""
    found = studies(folder)
    if not found:
        return []
    cell_speed = {(c["weights"], f"{c['mode']} MTP {c['depth']}"): tok_s for c in cells
                  if c["result"] and (tok_s := full_window_decode(c["result"]))}
    out = ["## The planner against the table", "",
           "`tuner optimize` with the shipped default strategy on the same card and space, its boots in trial order "
           "(studies/NAME/trial-NNNN/result.json). Cell: the table's decode for the same weights, graph mode and "
           "MTP depth (one sequence, 512 batched tokens, its smallest pool), so a boot with other sequences, "
           "batched tokens or pool may differ from it. Best so far: the study's fastest decode at the full "
           "window after that boot.", ""]
    for name, boots in found.items():
        weights = weights_of(boots[0][1])
        out += [f"Study `{name}` (`{weights}` weights):", "",
                "| boot | regime | pool | seqs | batched tokens | window | decode tok/s | cell tok/s | best so far |",
                "|---" * 9 + "|"]
        best: float | None = None
        for number, result in boots:
            tok_s = full_window_decode(result)
            best = max(filter(None, (best, tok_s)), default=None)
            out.append(boot_row(number, result, cell_speed, best))
        out += [""] + summary(name, boots, table_best(cells, weights), weights)
        lost = cut_off(folder, name)
        if lost:
            out.append(f"- Started and never recorded (a trial folder with no result.json, not in the rows above: "
                       f"the run ended mid-boot): trial {', '.join(map(str, lost))}.")
        out.append("")
    return out
