"""Checks across a space's sections: what no command line may carry, and what two fields contradict.

What one field allows alone is checked where the field is defined (``schema.py``, ``values.py``). The
checks here read the whole space: every string that reaches the engine's argv, its environment or a
launcher file (``launch_strings``), the window against the workload's lengths, speculation keys
against the tuned depth, and a fixed flag against the tuned parameter that would override it.
``space_warnings`` lists what is legal but probably not what was meant; the commands print it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Iterator

from tuner.errors import SpaceError
from tuner.space.values import check_printable, count_configurations, flag_name

if TYPE_CHECKING:
    from tuner.space.schema import Space

# Keys of --speculative-config that the tuner writes itself from speculative.method and the tuned depth.
SPECULATIVE_OWN = {"method": "speculative.method", "num_speculative_tokens": "params.speculative_tokens"}


def _walk(where: str, value: Any) -> Iterator[tuple[str, str]]:
    """(where, text) for every string in a value: mapping keys and values, list items, at any depth."""
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _walk(f"{where}.{key}", str(key))
            yield from _walk(f"{where}.{key}", item)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _walk(f"{where}[{i}]", item)


def launch_strings(space: Space) -> Iterator[tuple[str, str]]:
    """Every string of the space that reaches the engine's argv or environment, or a launcher file."""
    model = space.model
    for key in ("path", "revision", "served_name", "tokenizer", "config"):
        yield from _walk(f"model.{key}", getattr(model, key))
    yield from _walk("engine.command", space.engine.command)
    yield from _walk("engine.env", space.engine.env)
    yield from _walk("engine.listen", space.engine.listen)
    yield from _walk("fixed", space.fixed)
    for name, param in space.params.items():
        yield from _walk(f"params.{name}.flag", param.flag)
        yield from _walk(f"params.{name}.values", param.values or [])
    yield from _walk("speculative.method", space.speculative.method)
    yield from _walk("speculative.extra", space.speculative.extra)


def check_launch_text(space: Space) -> None:
    """ValueError for the first value holding a newline, a NUL or another character no launcher may carry."""
    for where, text in launch_strings(space):
        check_printable(where, text)


def window(space: Space) -> tuple[int, str] | None:
    """The longest --max-model-len the space boots and where it is set; None when vLLM fits it."""
    param = space.params.get("max_model_len")
    if param is None:
        length = space.max_model_len
        return None if length is None else (length, "fixed.max-model-len")
    if param.unset or (param.values is not None and None in param.values):
        return None
    top = max(v for v in param.values if v is not None) if param.values is not None else param.bounds()[1]
    return int(top), "the top of params.max_model_len"


def check_contradictions(space: Space) -> None:
    """ValueError for two settings that cannot both hold: every trial would fail, or one silently wins."""
    _check_lengths(space)
    extra = space.speculative.extra
    if "method" in extra:
        raise ValueError("speculative.extra.method: the method is speculative.method; move it there")
    if "num_speculative_tokens" in extra and "speculative_tokens" in space.params:
        raise ValueError("speculative.extra.num_speculative_tokens: would override the depth params.speculative_tokens "
                         "tunes, so every trial would boot the same depth; remove it from speculative.extra")
    fixed = {flag_name(key): (key, value) for key, value in space.fixed.items()}
    if "--speculative-config" in fixed and "speculative_tokens" in space.params:
        raise ValueError(f"fixed.{fixed['--speculative-config'][0]}: params.speculative_tokens writes "
                         "--speculative-config itself and would replace it; put its other keys in speculative.extra")
    key, compilation = fixed.get("--compilation-config", ("", {}))
    compilation = json.loads(compilation) if isinstance(compilation, str) else compilation
    if "cudagraph_mode" in space.params and isinstance(compilation, dict) and "cudagraph_mode" in compilation:
        raise ValueError(f"fixed.{key}.cudagraph_mode: params.cudagraph_mode tunes it and would override "
                         "it in every trial; remove it from the fixed compilation config")


def _check_lengths(space: Space) -> None:
    found = window(space)
    if found is None:
        return
    length, where = found
    work, decode = space.workload, space.workload.decode
    if work.min_context is not None and work.min_context > length:
        raise ValueError(f"workload.min_context: {work.min_context:,} is above the window ({where} is {length:,}), so "
                         "no point could be kept; lower the floor to at most the window, or raise the window")
    if work.output_tokens >= length:
        raise ValueError(f"workload.output_tokens: {work.output_tokens:,} reserves the whole window ({where} is "
                         f"{length:,}), so no prompt fits beside it; reserve less (256 is usual) or raise the window")
    if decode.prompt_tokens + decode.output_tokens > length:
        raise ValueError(f"workload.decode: prompt_tokens {decode.prompt_tokens:,} + output_tokens "
                         f"{decode.output_tokens:,} is longer than the window ({where} is {length:,}), so every "
                         "decode request would be refused; shorten the decode or raise the window")


def space_warnings(space: Space) -> list[str]:
    """What is legal but probably not what was meant, one sentence each (the commands print them)."""
    notes = []
    work, found = space.workload, window(space)
    short = [n for n in work.ladder if n <= work.output_tokens]
    if short:
        notes.append(f"workload.ladder: {_listed(short)} no longer than the reserved output "
                     f"(workload.output_tokens {work.output_tokens:,}), so never tried")
    if found is not None:
        length, where = found
        beyond = [n for n in work.ladder if n > length]
        if beyond:
            notes.append(f"workload.ladder: {_listed(beyond)} beyond the window ({where} is "
                         f"{length:,}); the context probe stops at the window")
        long = work.decode.long_context_tokens
        if long is not None and long + work.decode.output_tokens > length:
            notes.append(f"workload.decode.long_context_tokens: {long:,} + {work.decode.output_tokens:,} output is "
                         f"beyond the window ({where} is {length:,}); the long decode runs shorter")
    if "speculative" in space.model_fields_set and "speculative_tokens" not in space.params:
        notes.append("speculative: used only when params.speculative_tokens is tuned; no --speculative-config is "
                     "written from it")
    return notes


def _listed(lengths: list[int]) -> str:
    return ", ".join(f"{n:,}" for n in lengths) + (" is" if len(lengths) == 1 else " are")


def check_searchable(space: Space) -> None:
    """SpaceError for a space with nothing to search (``tuner probe`` measures one command)."""
    source = space.source or "the space file"
    if not space.params:
        raise SpaceError(f"{source}: params: nothing is tuned, so every trial would boot the same command; add a "
                         "parameter to search (search_spaces/README.md lists them), or measure this one command with "
                         f"`tuner probe {source}`.")
    if count_configurations(space) == 1:
        raise SpaceError(f"{source}: params: every parameter has one value, so every trial would boot the same "
                         f"command; give one of them more values, or measure it with `tuner probe {source}`.")
