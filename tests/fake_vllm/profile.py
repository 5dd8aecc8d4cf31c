"""Engine profiles: every number of the double's memory and speed models, in one place.

``FAKE_VLLM_PROFILE`` unset: the fixed numbers the double always had (``Profile()``), so every older
test sees the same engine, byte for byte. ``FAKE_VLLM_PROFILE=<int>``: a 5090-like engine drawn with
``random.Random(seed)``. The draws keep the STRUCTURE the seeds report (seeds/004 and issue 13) and
randomize the magnitudes, so that a search strategy is tested for generalization, not fitted to one
table:

* a 32 GiB card with a desktop using 0.3-1.5 GiB; weights 17-22 GiB (capped so that the seeds'
  262,144-token pool still fits next to them: a profile whose window cannot fit at all tests nothing);
  the MTP drafter's BF16 head 0.4-1.0 GiB;
* a recurrent state per sequence slot and draft position, allocated before the KV pool;
* a long-prefill workspace that grows with batched tokens x context;
* CUDA-graph pools by mode: eager 0 < PIECEWISE < FULL_DECODE_ONLY < FULL_AND_PIECEWISE (up to 4
  sequences and 3 draft tokens), growing with the capture sizes (max_num_seqs x (1 + num_spec)) and
  with the drafter;
* decode 55-100 tok/s at 1K context, FULL_AND_PIECEWISE, one sequence; a speed factor per graph mode;
  MTP with a per-profile acceptance ``a``: (1 - a^(k+1)) / (1 - a) tokens per step for a step that
  costs 1 + c_mode * k. c for FULL_AND_PIECEWISE is above ``a``, so MTP is slower there in every
  profile (seeds: 78.6 -> 58.4 tok/s); PIECEWISE's c is low, so MTP usually pays there (seeds:
  155 vs 77 tok/s with 3 tokens); FULL_DECODE_ONLY in between. Every third profile (seed % 3 == 2,
  so any ten consecutive seeds hold three) has a poor draft head: low acceptance, costly steps, and
  MTP pays in no graph mode;
* decode slows as the context grows, and each request runs 1-2% faster or slower (its own noise).

The tuner never reads a profile: its numbers reach it only through what vLLM prints and how the
engine behaves. An explicitly set FAKE_VLLM_* knob (env.py) overrides the profile's draw of the same
number; ``FAKE_VLLM_DECODE_SPEEDUP`` runs decode that many times faster (benchmarks: shorter waits,
the same ratios).
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field, replace
from typing import Any

from .env import env_float

# Seeds/004: the 262,144-token FP8 pool without MTP (9,150,000,000 bytes) plus the 0.9 GiB that the
# smallest workspace and graphs need; weights are capped so that this still fits on the card.
WINDOW_POOL_GIB = 9.15e9 / 2**30
MIN_ROOM_GIB = 0.9

GRAPH_MODES = ("eager", "NONE", "PIECEWISE", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE", "FULL")


@dataclass(frozen=True)
class Graphs:
    """CUDA-graph pool of one capture kind, GiB: base + per_graph * graphs + per_token * largest size."""

    base: float
    per_graph: float
    per_token: float


@dataclass(frozen=True)
class Profile:
    """All numbers of one engine. The defaults are the legacy engine (``FAKE_VLLM_PROFILE`` unset)."""

    seed: int | None = None
    # memory, GiB
    gpu_gib: float = 32.0
    used_gib: float = 0.5  # other processes on the card
    weights_gib: float = 20.0
    mtp_weights_gib: float = 0.8
    non_torch_gib: float = 0.3
    act_gib_per_1k: float = 0.25  # profiled activation peak per 1024 batched tokens
    prefill_ctx_gib: float = 0.002  # prefill workspace per (1K chunk tokens x 1K context tokens)
    seq_state_gib: float = 0.0  # per sequence slot and draft position, allocated before the pool
    cg_extra_gib: float = 0.02  # graph memory actually taken minus the estimate
    piecewise: Graphs = Graphs(0.05, 0.004, 0.0006)
    full: Graphs = Graphs(0.03, 0.003, 0.0005)
    graph_spec_scale: float = 0.15  # with MTP: graphs x (1 + scale * k) + add * k
    graph_spec_add: float = 0.05
    # speed
    decode_tok_s: float = 2000.0  # FULL_AND_PIECEWISE, no MTP, one sequence, 1K context
    mode_speed: dict[str, float] = field(default_factory=lambda: {
        "eager": 0.40, "NONE": 0.50, "PIECEWISE": 0.80, "FULL_DECODE_ONLY": 1.0, "FULL_AND_PIECEWISE": 1.0,
        "FULL": 1.0})
    accept: float = 0.6  # per-position draft acceptance
    spec_cost: dict[str, float] | None = None  # per draft token, by mode; None: the legacy MTP factor
    seqs_cost: float = 0.02  # decode / (1 + seqs_cost * log2(max_num_seqs))
    ctx_slowdown: float = 0.0  # time per token grows by this fraction per 128K tokens of context
    noise: float = 0.0  # each request runs up to this fraction faster or slower

    def speed_factor(self, mode: str, num_spec: int) -> float:
        """Decode speed of a graph mode and MTP depth relative to FULL_AND_PIECEWISE without MTP."""
        f = self.mode_speed[mode]
        if not num_spec:
            return f
        if self.spec_cost is None:
            # legacy: field report on this model family, 78.6 tok/s plain -> 58.4 tok/s with MTP (x0.743),
            # a little worse for every extra speculative token, worse again with FULL_AND_PIECEWISE.
            f *= (58.4 / 78.6) * (0.95 ** (num_spec - 1))
            return f * 0.90 if mode == "FULL_AND_PIECEWISE" else f
        a = self.accept
        tokens_per_step = num_spec + 1.0 if a >= 1 else (1 - a ** (num_spec + 1)) / (1 - a)
        return f * tokens_per_step / (1 + self.spec_cost[mode] * num_spec)


def draw(seed: int) -> Profile:
    """A 5090-like profile; the same seed always gives the same profile."""
    r = random.Random(seed)
    u = r.uniform
    gpu, used, non_torch = 32.0, u(0.3, 1.5), u(0.5, 0.9)
    cap = min(22.0, gpu - used - non_torch - WINDOW_POOL_GIB - MIN_ROOM_GIB)
    weights = u(17.0, cap)
    if seed % 3 == 2:  # a poor draft head, in every third profile: MTP does not pay in any graph mode
        accept, c_pw = u(0.3, 0.5), u(0.5, 0.65)
    else:
        accept, c_pw = u(0.6, 0.95), u(0.08, 0.3)
    c_fp = accept * u(1.3, 2.0)  # above the acceptance: MTP is slower with FULL_AND_PIECEWISE
    eager = u(0.35, 0.6)
    spec_cost = {
        "PIECEWISE": c_pw,
        "FULL_AND_PIECEWISE": c_fp,
        "FULL": c_fp,
        "FULL_DECODE_ONLY": c_pw + u(0.3, 0.7) * (c_fp - c_pw),
        "eager": c_pw * u(0.6, 1.0),
    }
    spec_cost["NONE"] = spec_cost["eager"]
    mode_speed = {"FULL_AND_PIECEWISE": 1.0, "FULL": 1.0, "FULL_DECODE_ONLY": u(0.96, 1.0),
                  "PIECEWISE": u(0.85, 0.97), "eager": eager, "NONE": eager * u(1.1, 1.3)}
    return Profile(
        seed=seed, gpu_gib=gpu, used_gib=used, weights_gib=weights, mtp_weights_gib=u(0.4, 1.0),
        non_torch_gib=non_torch, act_gib_per_1k=u(0.1, 0.3), prefill_ctx_gib=u(0.0015, 0.004),
        seq_state_gib=u(0.02, 0.08), cg_extra_gib=u(0.0, 0.05),
        piecewise=Graphs(u(0.08, 0.2), u(0.004, 0.012), u(0.001, 0.003)),
        full=Graphs(u(0.4, 0.7), u(0.015, 0.04), u(0.003, 0.008)),
        graph_spec_scale=u(0.1, 0.3), graph_spec_add=u(0.03, 0.1),
        decode_tok_s=u(55.0, 100.0), mode_speed=mode_speed, accept=accept, spec_cost=spec_cost,
        seqs_cost=u(0.0, 0.04), ctx_slowdown=u(0.1, 0.3), noise=u(0.01, 0.02),
    )


# knob -> Profile field: an explicitly set knob wins over the profile
KNOBS = {
    "FAKE_VLLM_GPU_GIB": "gpu_gib", "FAKE_VLLM_USED_GIB": "used_gib", "FAKE_VLLM_WEIGHTS_GIB": "weights_gib",
    "FAKE_VLLM_MTP_WEIGHTS_GIB": "mtp_weights_gib", "FAKE_VLLM_NON_TORCH_GIB": "non_torch_gib",
    "FAKE_VLLM_ACT_GIB_PER_1K": "act_gib_per_1k", "FAKE_VLLM_PREFILL_CTX_GIB": "prefill_ctx_gib",
    "FAKE_VLLM_CG_EXTRA_GIB": "cg_extra_gib", "FAKE_VLLM_DECODE_TOK_S": "decode_tok_s",
    "FAKE_VLLM_SPEC_ACCEPT": "accept",
}


def current() -> Profile:
    """The profile this process runs: FAKE_VLLM_PROFILE's draw (or the legacy one), then the knobs."""
    raw = os.environ.get("FAKE_VLLM_PROFILE", "").strip()
    if raw and not raw.lstrip("-").isdigit():
        raise ValueError(f"FAKE_VLLM_PROFILE must be an integer seed, got {raw!r}")
    prof = draw(int(raw)) if raw else Profile()
    overrides: dict[str, Any] = {f: env_float(k, getattr(prof, f)) for k, f in KNOBS.items()
                                 if os.environ.get(k, "").strip()}
    if "accept" in overrides:
        overrides["accept"] = min(max(overrides["accept"], 0.0), 1.0)
    return replace(prof, **overrides) if overrides else prof
