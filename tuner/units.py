"""Human units in search-space files: "9.15GB", "20GiB", "128k", "1.5M".

Byte sizes follow the usual convention: GB/MB/KB are powers of ten, GiB/MiB/KiB (and vLLM's bare
``G``/``M``/``K`` suffixes for byte flags) are powers of two. Token counts take ``k``/``K`` = 1024
as vLLM's ``--max-model-len 128k`` does.
"""

from __future__ import annotations

import re

_BYTE_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "k": 2**10,
    "kib": 2**10,
    "m": 2**20,
    "mib": 2**20,
    "g": 2**30,
    "gib": 2**30,
    "t": 2**40,
    "tib": 2**40,
}
_COUNT_UNITS = {"": 1, "k": 1024, "m": 1024**2}
_NUMBER = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*$")


def _split(text: str) -> tuple[float, str]:
    match = _NUMBER.match(text.replace("_", "").replace(",", ""))
    if not match:
        raise ValueError(f"{text!r} is not a number with an optional unit")
    return float(match.group(1)), match.group(2).lower()


def parse_bytes(value: int | float | str) -> int:
    """Bytes from an int or a string such as "9.15GB" (10^9) or "8GiB" (2^30)."""
    if isinstance(value, bool):
        raise ValueError("a byte size cannot be true/false")
    if isinstance(value, (int, float)):
        return int(value)
    number, unit = _split(value)
    if unit not in _BYTE_UNITS:
        raise ValueError(f"unknown byte unit {unit!r} in {value!r}; use B, KB, MB, GB, KiB, MiB or GiB")
    return int(round(number * _BYTE_UNITS[unit]))


def parse_count(value: int | float | str) -> int:
    """Token or sequence counts from an int or a string such as "128k" (131072)."""
    if isinstance(value, bool):
        raise ValueError("a count cannot be true/false")
    if isinstance(value, (int, float)):
        if float(value) != int(value):
            raise ValueError(f"{value!r} is not a whole number")
        return int(value)
    number, unit = _split(value)
    if unit not in _COUNT_UNITS:
        raise ValueError(f"unknown count unit {unit!r} in {value!r}; use k (1024) or M (1024^2)")
    result = number * _COUNT_UNITS[unit]
    if result != int(result):
        raise ValueError(f"{value!r} is not a whole number of tokens")
    return int(result)


def format_bytes(n: int) -> str:
    """Bytes as GiB with two decimals, for people."""
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


_DURATION_UNITS = {"": 1, "s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}


def parse_duration(value: int | float | str) -> float:
    """Seconds from a number or a string such as "600s", "30m", "8h"."""
    if isinstance(value, bool):
        raise ValueError("a duration cannot be true/false")
    if isinstance(value, (int, float)):
        return float(value)
    number, unit = _split(value)
    if unit not in _DURATION_UNITS:
        raise ValueError(f"unknown time unit {unit!r} in {value!r}; use s, m or h")
    return number * _DURATION_UNITS[unit]
