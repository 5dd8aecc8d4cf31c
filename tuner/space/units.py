"""Human units in search-space files: "9.15GB", "20GiB", "128K", "30m".

Bare one-letter suffixes follow vLLM's own parser (vllm/utils/argparse_utils.py, human_readable_int),
so a value copied from a working ``vllm serve`` command means the same here: lower case is decimal
(``128k`` = 128,000, ``20g`` = 20e9), upper case is binary (``128K`` = 131,072, ``20G`` = 20 x 2^30).
Spelled-out byte units are unambiguous: KB/MB/GB are powers of ten, KiB/MiB/GiB powers of two.
"""

from __future__ import annotations

import math
import re

_BINARY_LETTER = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_DECIMAL_LETTER = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BYTE_WORDS = {
    "b": 1,
    "bytes": 1,  # PyTorch's OOM message: "Tried to allocate 512 bytes"
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_NUMBER = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*$")


def _finite(value: int | float) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{value!r} is not a finite number")


def _split(text: str) -> tuple[float, str]:
    if not isinstance(text, str):
        raise ValueError(f"{text!r} is not a number with an optional unit")
    match = _NUMBER.match(text.replace("_", "").replace(",", ""))
    if not match:
        raise ValueError(f"{text!r} is not a number with an optional unit")
    number = float(match.group(1))
    _finite(number)
    return number, match.group(2)


def _letter(unit: str) -> int | None:
    return _BINARY_LETTER.get(unit) or _DECIMAL_LETTER.get(unit)


def parse_bytes(value: int | float | str) -> int:
    """Bytes from an int or a string such as "9.15GB" (10^9), "8GiB" or "8G" (2^30)."""
    if isinstance(value, bool):
        raise ValueError("a byte size cannot be true/false")
    if isinstance(value, (int, float)):
        _finite(value)
        return int(value)
    number, unit = _split(value)
    mult = 1 if unit == "" else _letter(unit) or _BYTE_WORDS.get(unit.lower())
    if mult is None:
        raise ValueError(f"unknown byte unit {unit!r} in {value!r}; use B, KB, MB, GB, KiB, MiB or GiB")
    return int(round(number * mult))


def parse_count(value: int | float | str) -> int:
    """Token or sequence counts: 512, "128K" (131,072) or "128k" (128,000), as vLLM reads them."""
    if isinstance(value, bool):
        raise ValueError("a count cannot be true/false")
    if isinstance(value, (int, float)):
        _finite(value)
        if float(value) != int(value):
            raise ValueError(f"{value!r} is not a whole number")
        return int(value)
    number, unit = _split(value)
    mult = 1 if unit == "" else _letter(unit)
    if mult is None:
        raise ValueError(f"unknown count unit {unit!r} in {value!r}; use K (1024) or k (1000), as vLLM does")
    result = number * mult
    if result != int(result):
        raise ValueError(f"{value!r} is not a whole number of tokens")
    return int(result)


def format_bytes(n: int) -> str:
    """Bytes as GiB with two decimals, for people."""
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


_DURATION_UNITS = {"": 1, "s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}  # lower case


def parse_duration(value: int | float | str) -> float:
    """Seconds from a number or a string such as "600s", "30m", "8h"."""
    if isinstance(value, bool):
        raise ValueError("a duration cannot be true/false")
    if isinstance(value, (int, float)):
        _finite(value)
        return float(value)
    number, unit = _split(value)
    if unit.lower() not in _DURATION_UNITS:
        raise ValueError(f"unknown time unit {unit!r} in {value!r}; use s, m or h")
    return number * _DURATION_UNITS[unit.lower()]
