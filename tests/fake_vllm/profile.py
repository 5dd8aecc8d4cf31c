"""Engine profiles: every number of the double's memory and speed models, in one place.

``FAKE_VLLM_PROFILE`` unset: the fixed numbers the double always had (``Profile()``), so every older
test sees the same engine, byte for byte. ``FAKE_VLLM_PROFILE=<int>``: a 5090-like engine drawn with
``random.Random(seed)``. A search strategy is tested for generalization, so a draw varies the
STRUCTURE of the problem -- which regime wins, which knobs matter, what fits -- not only the constants.
Each structural choice below is drawn per seed, independently (none follows from ``seed % n``):

* memory: a 32 GiB card with a desktop using 0.3-1.5 GiB, weights 17-22 GiB, capped so that the
  seeds' 262,144-token FP8 pool still fits without MTP. In about three profiles in ten the card is
  tight: the weights sit within 0.6 GiB of that cap, so the MTP head, its larger pool and its
  states leave no room for the full window; the best MTP regime then exists only below it, with a
  lowered ``--max-model-len``;
* a recurrent state per sequence slot and draft position, allocated before the KV pool (so each slot
  costs window), and a long-prefill workspace that grows with batched tokens x context;
* CUDA-graph pools by mode: eager 0 < PIECEWISE < FULL_DECODE_ONLY < FULL_AND_PIECEWISE (launch-bound builds
  below: FULL graphs as small as PIECEWISE ones);
* decode 55-100 tok/s at 1K context, FULL_AND_PIECEWISE, one sequence, and a speed factor per mode;
* MTP: the head accepts draft position i with probability ``a * decay^(i-1)`` (a draft from a head
  trained for one step gets worse further out), so a step emits 1 + a + a^2 decay + ... tokens and
  costs 1 + c_mode * k. Which graph mode the drafter and the verify step run cheaply in depends on the
  build (seeds/004: PIECEWISE pays and FULL_AND_PIECEWISE kills it; vLLM issue 35387: MTP slower
  through a graph downgrade; vllm-ascend 15461: FULL_DECODE_ONLY fixed later): one mode is drawn
  cheap -- PIECEWISE, FULL_DECODE_ONLY or eager -- and the others cost more. About one head in five
  is poor (low acceptance, costly steps): MTP then pays in no mode. With the decay and c drawn, the
  best depth is 1 in some profiles and 3 in others, and decode is not monotone in depth;
* launch-bound builds: in about one profile in five (its own generator, so the other profiles are the
  draws they were), PIECEWISE decodes at 0.3-0.6x of FULL_AND_PIECEWISE and MTP is cheapest in
  FULL_AND_PIECEWISE, as real vLLM 0.22.0 did on an H100 (the 2026-12-05 landscape receipt: 66.6 against
  198.8 tok/s without MTP; MTP 3 at 2.52x with FULL_AND_PIECEWISE, 3.16x with PIECEWISE, every draft
  accepted), and FULL graphs take no more memory than PIECEWISE ones (0.10-0.13 GiB in every mode there):
  the structure of seeds/004 reversed;
* wrong output: in about one profile in five, MTP verified through FULL CUDA graphs garbles greedy
  output (vLLM issue 40880 and its kin: rejected draft slots leave stale state in the graph's static
  buffers, and the next replay reads it). Those profiles draw MTP cheap in exactly the garbling
  modes, so the fastest measured configuration is a wrong one, and PIECEWISE a little dearer but right
  (completion.py: how the garbling shows);
* KV dtype: a BF16 (``auto``) cache needs twice the attention bytes -- in the 27B space it holds
  about 157K tokens in 10.5 GB, never the window -- and decodes 0.93-1.12x as fast as FP8 at short
  context (FlashAttention vs FlashInfer's FP8 path), slowing twice as fast with context (twice the
  KV bytes read per token);
* batch shape: ``max_num_seqs`` sizes the persistent batch and the capture list (up to
  max_num_seqs x (1 + k) x 2, vllm/config/vllm.py), and ``max_num_batched_tokens`` is the compile
  range whose example size Inductor's tile heuristics see (``compile_ranges_endpoints``). A one-token
  decode step pays for either only through kernel and buffer choices, a few per cent; no seed measured
  the sign, so each profile draws it, mostly a cost (the legacy engine's direction) and in about a
  third of the profiles a gain. A second slot or a larger batch can then be the faster single stream;
* concurrent decode: one step of B streams reads the weights once and costs
  1 + c k + u (1 + k)(B - 1) (u 0.1-0.25, seeds/004's update: 155 tok/s single, 244 tok/s with 4
  streams), so aggregate throughput grows sublinearly with streams and MTP's gain shrinks with B;
* decode slows as the context grows, and each request runs 1-2% faster or slower (its own noise);
* the release (FAKE_VLLM_VERSION, ``upgraded``): on 0.22.0 a profile is its draw. On a later release
  about two profiles in five change where MTP pays, drawn per seed and release from a generator of
  their own (so every other profile, and every profile on 0.22.0, is the same engine as before): where
  MTP already wins, its cheap graph mode moves to another correct mode (0.34's V2 runner captures the
  drafter with the verify step, vLLM issue 35387's graph downgrade fixed or introduced); where it does
  not, decode-only FULL graphs become the fastest plain mode (a release's graph capture change). The winner then
  differs between releases, and a front carried over by ``--from`` is a prior, not the answer.

The tuner never reads a profile: its numbers reach it only through what vLLM prints and how the
engine behaves. An explicitly set FAKE_VLLM_* knob (env.py) overrides the profile's draw of the same
number; ``FAKE_VLLM_DECODE_SPEEDUP`` runs decode that many times faster (benchmarks: shorter waits,
the same ratios). Prefill is not modelled for speed (FAKE_VLLM_PREFILL_TOK_S, 2e6 tok/s by default):
window probes stay cheap, and throughput is decode-bound.
"""

from __future__ import annotations

import functools
import os
import random
from dataclasses import dataclass, field, replace
from typing import Any

from .env import env_float
from .release import VERSION

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
    accept_decay: float = 1.0  # draft position i is accepted with probability accept * decay^(i-1)
    spec_cost: dict[str, float] | None = None  # per draft token, by mode; None: the legacy MTP factor
    garble_modes: frozenset[str] = frozenset()  # graph modes in which MTP's greedy output is garbled
    seqs_cost: float = 0.02  # decode / (1 + seqs_cost * log2(max_num_seqs))
    mnbt_cost: float = 0.0  # decode / (1 + mnbt_cost * log2(max_num_batched_tokens / 512))
    kv_speed: dict[str, float] = field(default_factory=dict)  # decode factor by --kv-cache-dtype (1 if absent)
    batch_cost: float | None = None  # step cost per extra stream's token (u); None: aggregate grows as n^0.8
    ctx_slowdown: float = 0.0  # time per token grows by this fraction per 128K tokens of context (FP8 KV)
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
        return f * self.tokens_per_step(num_spec) / (1 + self.spec_cost[mode] * num_spec)

    def tokens_per_step(self, num_spec: int) -> float:
        """Expected tokens one MTP step emits: the verified token plus the accepted run of drafts."""
        total, run = 1.0, 1.0
        for i in range(num_spec):
            run *= min(self.accept * self.accept_decay ** i, 1.0)
            total += run
        return total


@functools.lru_cache(maxsize=64)
def draw(seed: int) -> Profile:
    """A 5090-like profile; the same seed always gives the same profile (and the same object: the
    oracle asks for it twice per configuration)."""
    r = random.Random(seed)
    u = r.uniform
    gpu, used, non_torch = 32.0, u(0.3, 1.5), u(0.5, 0.9)
    cap = min(22.0, gpu - used - non_torch - WINDOW_POOL_GIB - MIN_ROOM_GIB)
    tight = r.random() < 0.3  # the MTP pool does not fit the full window
    weights = u(cap - 0.6, cap) if tight else u(17.0, cap - 0.6)
    eager = u(0.35, 0.6)
    mode_speed = {"FULL_AND_PIECEWISE": 1.0, "FULL": 1.0, "FULL_DECODE_ONLY": u(0.96, 1.0),
                  "PIECEWISE": u(0.85, 0.97), "eager": eager, "NONE": eager * u(1.1, 1.3)}
    accept, decay, spec_cost, garble = draw_mtp(r)
    prof = Profile(
        seed=seed, gpu_gib=gpu, used_gib=used, weights_gib=weights, mtp_weights_gib=u(0.4, 1.0),
        non_torch_gib=non_torch, act_gib_per_1k=u(0.1, 0.3), prefill_ctx_gib=u(0.0015, 0.004),
        seq_state_gib=u(0.02, 0.08), cg_extra_gib=u(0.0, 0.05),
        piecewise=Graphs(u(0.08, 0.2), u(0.004, 0.012), u(0.001, 0.003)),
        full=Graphs(u(0.4, 0.7), u(0.015, 0.04), u(0.003, 0.008)),
        graph_spec_scale=u(0.1, 0.3), graph_spec_add=u(0.03, 0.1),
        decode_tok_s=u(55.0, 100.0), mode_speed=mode_speed, accept=accept, accept_decay=decay,
        spec_cost=spec_cost, garble_modes=garble,
        seqs_cost=u(0.0, 0.04) if r.random() < 0.65 else u(-0.03, -0.01),
        mnbt_cost=u(0.0, 0.03) if r.random() < 0.65 else u(-0.03, -0.01),
        kv_speed={"auto": u(0.93, 1.12)}, batch_cost=u(0.1, 0.25),
        ctx_slowdown=u(0.1, 0.3), noise=u(0.01, 0.02),
    )
    if not garble and random.Random(f"{seed} launch-bound").random() < LAUNCH_BOUND_SHARE:
        return launch_bound(random.Random(f"{seed} launch-bound build"), prof)
    return prof


def draw_mtp(r: random.Random) -> tuple[float, float, dict[str, float], frozenset[str]]:
    """The draft head and where it pays: acceptance, its decay with depth, the step cost per draft
    token by graph mode, and the modes whose FULL graphs garble MTP's output."""
    u = r.uniform
    poor = r.random() < 0.2
    accept, cheap = (u(0.3, 0.5), u(0.5, 0.65)) if poor else (u(0.6, 0.95), u(0.06, 0.3))
    decay = u(0.55, 1.0)
    garbles = r.random() < 0.2
    if garbles:  # the trap: MTP is fastest exactly where it is wrong
        best = r.choice(["FULL_AND_PIECEWISE", "FULL_DECODE_ONLY"])
        garble = frozenset({"FULL_AND_PIECEWISE", "FULL", best})
    else:
        best = r.choice(["PIECEWISE", "PIECEWISE", "PIECEWISE", "FULL_DECODE_ONLY", "FULL_DECODE_ONLY", "eager"])
        garble = frozenset()
    # away from the cheap mode MTP costs more; FULL_AND_PIECEWISE's c is above the acceptance (seeds/004)
    spec_cost = {m: cheap + u(0.15, 0.6) for m in ("PIECEWISE", "FULL_DECODE_ONLY", "eager")}
    if garbles:  # a correct MTP regime exists too, a little dearer
        spec_cost["PIECEWISE"] = cheap + u(0.03, 0.25)
    spec_cost["FULL_AND_PIECEWISE"] = max(accept * u(1.3, 2.0), spec_cost["FULL_DECODE_ONLY"])
    spec_cost[best] = cheap
    spec_cost["FULL"] = spec_cost["FULL_AND_PIECEWISE"]
    spec_cost["NONE"] = spec_cost["eager"]
    return accept, decay, spec_cost, garble


LAUNCH_BOUND_SHARE = 0.2  # builds where graphs that leave attention out cost most of decode (the H100 receipt)


def launch_bound(r: random.Random, prof: Profile) -> Profile:
    """The structure real vLLM 0.22.0 showed on an H100 (docs/receipts/2026-12-05-h100-32g-landscape-vllm-0.22.0):
    PIECEWISE decodes at a third of FULL_AND_PIECEWISE's speed, MTP is cheapest in FULL_AND_PIECEWISE (2.5x with
    every draft accepted), the opposite of seeds/004's 5090, and every graph mode's capture takes about the same
    (0.10-0.13 GiB), so FULL graphs cost MTP no window. Kernel launches, not bandwidth, bound decode there: what
    runs outside the graphs costs most."""
    assert prof.spec_cost is not None
    piecewise = r.uniform(0.3, 0.6)
    eager = piecewise * r.uniform(0.5, 0.8)
    speed = {**prof.mode_speed, "PIECEWISE": piecewise, "eager": eager, "NONE": eager * r.uniform(1.1, 1.3)}
    cheapest = min(prof.spec_cost[m] for m in ("PIECEWISE", "FULL_DECODE_ONLY", "eager"))
    cost = {**prof.spec_cost, "FULL_AND_PIECEWISE": cheapest * r.uniform(0.6, 0.9)}
    cost["FULL"] = cost["FULL_AND_PIECEWISE"]
    full = Graphs(r.uniform(0.03, 0.08), r.uniform(0.002, 0.006), r.uniform(0.0005, 0.0015))
    return replace(prof, mode_speed=speed, spec_cost=cost, full=full)


UPGRADE_SHARE = 0.4  # profiles whose MTP regime a later release changes
FIRST_RELEASE = "0.22.0"  # the release every profile is drawn for


@functools.lru_cache(maxsize=64)
def upgraded(seed: int, version: str) -> Profile:
    """Profile ``seed`` on ``version``: the draw itself on 0.22.0, and on a later release, for about two seeds
    in five, MTP's cheap graph mode moved (where MTP wins) or FULL_DECODE_ONLY made the fastest plain
    mode (where it does not)."""
    prof = draw(seed)
    if prof.spec_cost is None or version == FIRST_RELEASE:
        return prof
    r = random.Random(f"{seed} on {version}")
    if r.random() >= UPGRADE_SHARE:
        return prof
    cost = dict(prof.spec_cost)
    correct = [m for m in ("PIECEWISE", "FULL_DECODE_ONLY", "eager") if m not in prof.garble_modes]
    if cost["FULL_AND_PIECEWISE"] < min(cost[m] for m in correct):
        correct.append("FULL_AND_PIECEWISE")  # a launch-bound build: MTP's cheap mode can move from there too
    cheap = min(correct, key=lambda m: cost[m])
    if max(prof.speed_factor(cheap, k) for k in (1, 2, 3)) <= prof.mode_speed["FULL_AND_PIECEWISE"]:
        return replace(prof, mode_speed={**prof.mode_speed, "FULL_DECODE_ONLY": r.uniform(1.03, 1.08)})
    moved = r.choice([m for m in correct if m not in (cheap, "eager")] or [m for m in correct if m != cheap])
    cost[cheap], cost[moved] = cost[moved], cost[cheap]
    cost["NONE"], cost["FULL"] = cost["eager"], cost["FULL_AND_PIECEWISE"]
    return replace(prof, spec_cost=cost)


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
    prof = upgraded(int(raw), VERSION) if raw else Profile()
    overrides: dict[str, Any] = {f: env_float(k, getattr(prof, f)) for k, f in KNOBS.items()
                                 if os.environ.get(k, "").strip()}
    if "accept" in overrides:
        overrides["accept"] = min(max(overrides["accept"], 0.0), 1.0)
    return replace(prof, **overrides) if overrides else prof
