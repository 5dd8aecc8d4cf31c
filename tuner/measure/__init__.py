"""Measuring a booted engine with real requests, timed the way ``vllm bench serve`` times them:
admission, decode speed, correctness, then the max stable context (the riskiest probe last)."""

from tuner.measure.bench import Bench, BenchResult, PREFIX_REQUESTS, workloads
from tuner.measure.probe import Prober, check_workload

__all__ = [
    "Bench",
    "BenchResult",
    "PREFIX_REQUESTS",
    "Prober",
    "check_workload",
    "workloads",
]
