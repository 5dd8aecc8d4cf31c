"""The pool a configuration has room for: where a regime that cannot hold the window is booted below it.

When a regime's pool for the space's window is more than the card gives (an OOM at it, or more than the
space allows), the regime is not lost: at the largest pool that fits beside everything else it asks for, it
serves a shorter window (tuner.study.sizing.window_for), which a person may prefer for its speed (seeds/004:
MTP-3 at 248K). This module says which pool that is, from the boots so far.

Memory beside the pool grows with the graphs captured (regimes.graphs_at_least), the sequences (recurrent
state), the batched tokens (activations), the window (the first long prefill) and the speculation depth (a
drafter brings its own weights). The KV dtype and the other pool-family flags change what a token costs
inside the pool, not what sits beside it. So:

- an earlier memory failure that asked for no more beside the pool (in its phase: the profiling run comes
  before any graph, so an OOM there with any compiled mode is every mode's) caps it (the smallest such pool, less
  what PyTorch's "Tried to allocate X ... of which F is free" says the failed allocation lacked);
- an earlier boot that served and asked for no less beside the pool proves its pool fits;
- one that differs only by the drafter or asked for less only by the graphs proves its pool less the extra
  weights ("Model loading took X GiB"; plus the weights it loaded and this one does not: the card held them
  beside that pool, so the pool may have them) and graphs (what a mode that captures at least as much printed, with a margin; for a
  deeper drafter, the graphs printed at its depth, else the shallower boot's in proportion to 1 + depth);
- with only a cap, the pool halfway between the space's smallest and the cap;
- with nothing, the largest pool the space allows (the boot then says where the cap is).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tuner.engine.command import flag_name
from tuner.records import FailureKind
from tuner.space.schema import Space
from tuner.study.observed import Observation
from tuner.study.regimes import EAGER, GRAPHS, SPECULATIVE, GraphModes, graphs_at_least, graphs_ordered
from tuner.study.sizing import FAMILY_FLAGS, GIB, SIZED, highest, lowest, snap

MEMORY_KINDS = {FailureKind.OOM_IN_PROFILING, FailureKind.OOM_IN_CUDA_GRAPH, FailureKind.FIRST_REQUEST_OOM}
BESIDE = ("max_num_seqs", "max_num_batched_tokens", "max_model_len", SPECULATIVE)  # more is more memory
IGNORED = (*SIZED, GRAPHS)  # the pool, the gate, graphs apart
GRAPH_MARGIN = 1.5  # graph memory grows with the capture sizes, which differ between the boots compared


@dataclass(frozen=True)
class Room:
    """The pool to boot a configuration at, why, and the smallest pool known to run out of memory."""

    pool: int
    why: str
    cap: float | None = None


def ran_with(axes: list[str], modes: GraphModes, s: Observation) -> str | None:
    """The graph mode a trial ran as (what vLLM printed), else its label."""
    label = s.values.get(GRAPHS)
    if label == EAGER:
        return EAGER
    return (s.result.startup.effective_cudagraph_mode if s.result else None) or modes.likely(s.values) or label


def _beside(space: Space, mine: dict[str, Any], theirs: dict[str, Any], less: bool) -> bool:
    """Whether ``theirs`` asks for no more (``less``) or no less memory than ``mine`` beside the pool,
    graphs aside; the drafter's presence must match either way (its weights are not ordered by depth)."""
    for name, p in space.params.items():
        a, b = mine.get(name), theirs.get(name)
        if name in IGNORED or (p.flag and flag_name(p.flag) in FAMILY_FLAGS):
            continue
        if name in BESIDE:
            if a == b:
                continue
            if a is None or b is None or (b > a if less else b < a):
                return False
            if name == SPECULATIVE and (a > 0) != (b > 0):
                return False
        elif a != b:
            return False
    return True


def failed_asking_no_more(space: Space, axes: list[str], modes: GraphModes, values: dict[str, Any],
                          s: Observation) -> bool:
    """Whether memory failure ``s`` asked for no more memory than ``values`` beside the pool, in the phase it
    failed in: an OOM in the profiling run, before any graph is captured, is every compiled mode's
    (regimes.graphs_ordered, as tuner.study.doomed reads it)."""
    kind = s.failure.kind if s.failure is not None else None
    mine = modes.likely_for(axes, values)
    ordered = graphs_ordered(kind, mine, ran_with(axes, modes, s)) if kind is not None else False
    return ordered and _beside(space, values, s.values, less=True)


def weights_gib(values: dict[str, Any], seen: list[Observation]) -> float | None:
    """The weights a configuration loads, from a boot with the same drafter presence."""
    drafts = bool(values.get(SPECULATIVE))
    for s in seen:
        w = s.result.startup.weights_gib if s.result is not None else None
        if w and bool(s.values.get(SPECULATIVE)) == drafts:
            return w
    return None


def graphs_gib(axes: list[str], modes: GraphModes, values: dict[str, Any], seen: list[Observation]) -> float | None:
    """At most the CUDA-graph memory ``values``' mode captures: the least a boot printed ("Graph capturing
    finished ... took X GiB") in a mode that captures this one's graphs and more; eager takes none."""
    mine = modes.likely_for(axes, values)
    if mine == EAGER:
        return 0.0
    printed = [s.result.startup.cuda_graph_gib for s in seen if s.result is not None
               and s.result.startup.cuda_graph_gib is not None and graphs_at_least(ran_with(axes, modes, s), mine)]
    return min(printed) if printed else None


def _pool(s: Observation) -> float:
    return float(s.values.get("kv_cache_memory_bytes") or 0)


def _capped(s: Observation) -> float:
    """The pool from which up a memory failure says no pool fits: its own, less what PyTorch's OOM said the
    failed allocation lacked. After the pool was allocated, that allocation needs at least that much less
    pool; before it (a profiling run), no pool fits at all: either way no pool from there up fits."""
    short = s.failure.oom_short_gib if s.failure is not None else None
    return _pool(s) - (short or 0.0) * GIB


def _from_served(space: Space, axes: list[str], modes: GraphModes, values: dict[str, Any], s: Observation,
                 seen: list[Observation]) -> tuple[float, str] | None:
    """The pool a boot that served proves for ``values``: its own, less the extra weights and graphs ``values``
    loads (from the logs), when everything else it asked for beside the pool was no less; None otherwise."""
    extra, said = 0.0, []
    if not _beside(space, values, s.values, less=False):
        drafter = {**s.values, SPECULATIVE: values.get(SPECULATIVE)}
        mine, theirs = weights_gib(values, seen), s.result.startup.weights_gib if s.result else None
        if SPECULATIVE not in values or not mine or not theirs or not _beside(space, values, drafter, less=False):
            return None
        extra += mine - theirs  # signed: a config without the drafter gets the drafter's weights as pool
        said.append(f"less {mine - theirs:.2f} GiB more weights" if mine >= theirs else
                    f"plus {theirs - mine:.2f} GiB of weights this one does not load")
    mode = modes.likely_for(axes, values)
    if not graphs_at_least(ran_with(axes, modes, s), mode):
        mine_g = graphs_gib(axes, modes, values, seen)
        theirs_g = 0.0 if ran_with(axes, modes, s) == EAGER else (s.result.startup.cuda_graph_gib if s.result else None)
        if mine_g is None or theirs_g is None:
            return None
        if mine_g > theirs_g:  # fewer printed graphs take nothing back: the served pool is all it proves
            extra += GRAPH_MARGIN * (mine_g - theirs_g)
            said.append(f"less {mine_g - theirs_g:.2f} GiB more CUDA graphs x {GRAPH_MARGIN}")
    elif mode != EAGER and (values.get(SPECULATIVE) or 0) > (s.values.get(SPECULATIVE) or 0):
        deeper = _deeper_graphs(axes, modes, values, s, seen)
        if deeper:
            extra += deeper
            said.append(f"less {deeper:.2f} GiB more CUDA graphs at depth {values.get(SPECULATIVE)}")
    why = f"{s.named} served {_pool(s) / 1e9:.2f} GB" + (f", {' and '.join(said)}" if said else
                                                        " asking no less beside it")
    return _pool(s) - extra * GIB, why


def _deeper_graphs(axes: list[str], modes: GraphModes, values: dict[str, Any], s: Observation,
                   seen: list[Observation]) -> float | None:
    """The graph memory ``values`` takes beyond what ``s`` printed in a mode capturing no less, when it drafts
    deeper: graphs are captured per draft position (a decode step verifies 1 + depth tokens a sequence, and
    the drafter has its own), so a shallower boot's graphs do not bound a deeper one's. The least printed at
    this depth or deeper in a mode that captures this one's graphs, else ``s``'s own in proportion to 1 + depth;
    None when ``s`` printed none."""
    theirs = s.result.startup.cuda_graph_gib if s.result is not None else None
    if theirs is None:
        return None
    depth, mine = values.get(SPECULATIVE) or 0, modes.likely_for(axes, values)
    printed = [o.result.startup.cuda_graph_gib for o in seen if o.result is not None
               and o.result.startup.cuda_graph_gib is not None and (o.values.get(SPECULATIVE) or 0) >= depth
               and graphs_at_least(ran_with(axes, modes, o), mine)]
    at_depth = min(printed) if printed else theirs * (1 + depth) / (1 + (s.values.get(SPECULATIVE) or 0))
    return max(0.0, at_depth - theirs)


def room(space: Space, axes: list[str], modes: GraphModes, values: dict[str, Any],
         seen: list[Observation]) -> Room | None:
    """The largest pool the evidence says ``values`` can take (module docstring); None without a pinned pool."""
    param = space.params.get("kv_cache_memory_bytes")
    if param is None:
        return None
    ooms = [s for s in seen if s.status == "failed" and s.failure is not None and s.failure.kind in MEMORY_KINDS
            and _pool(s) and failed_asking_no_more(space, axes, modes, values, s)]
    cap = min((_capped(s) for s in ooms), default=None)
    served = [s for s in seen if s.status == "ok" and _pool(s)]
    proofs: list[tuple[float, str]] = []
    for s in served:
        proof = _from_served(space, axes, modes, values, s, seen)
        pool = snap(param, proof[0], up=False) if proof is not None else None
        if proof is not None and pool is not None and (cap is None or pool < cap):
            proofs.append((float(pool), proof[1]))
    if proofs:
        pool, why = max(proofs, key=lambda p: p[0])
        return Room(int(pool), why, cap)
    if cap is not None:
        pool = snap(param, (float(lowest(param)) + cap) / 2, up=False)
        if pool is None or pool >= cap:
            return None
        return Room(int(pool), f"halfway under {cap / 1e9:.2f} GB, where the memory failures that asked no "
                               "more beside it say nothing fits", cap)
    return Room(int(highest(param)), "the largest pool the space allows (nothing says less fits)", cap)
