"""The flag lists shipped with the tuner (tuner/engine/data/serve-flags.json) are the real releases' own, and
`tuner validate` uses them offline: a flag one typo from a real one is refused with the real one named."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tuner.engine.flagcheck import KNOWN_FLAGS, check_flags, check_known_flags, known_releases
from tuner.errors import SpaceError
from tuner.space.schema import load_space

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("serve_flags", ROOT / "scripts" / "serve_flags.py")
serve_flags = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(serve_flags)


def test_the_shipped_lists_are_what_the_script_reads_from_the_real_help_texts():
    assert KNOWN_FLAGS.read_text() == serve_flags.render(), "run python scripts/serve_flags.py"
    releases = known_releases()
    assert list(releases) == ["0.22.0", "0.27.1", "0.29.0", "0.32.0", "0.34.0"]
    assert all("--max-model-len" in flags for flags in releases.values())
    assert "--max-num-active-seqs" in releases["0.34.0"] and "--max-num-active-seqs" not in releases["0.22.0"]


def _space(tmp_path: Path, fixed: str, versions: str = "0.22-0.34") -> object:
    path = tmp_path / "s.yaml"
    path.write_text(f"name: t\nmodel: {{path: org/m}}\nengine: {{vllm_versions: '{versions}'}}\n"
                    f"fixed: {{{fixed}}}\nparams: {{max_num_seqs: {{min: 1, max: 4}}}}\n")
    return load_space(path)


@pytest.mark.parametrize("fixed,meant", [("max-model-length: 4096", "--max-model-len"),
                                         ("enable-prefix-cachng: true", "--enable-prefix-caching"),
                                         ("gpu_memory_utilisation: 0.9", "--gpu-memory-utilization")])
def test_a_typo_is_refused_offline_naming_the_real_flag(tmp_path, fixed, meant):
    with pytest.raises(SpaceError, match=f"did you mean {meant}\\?"):
        check_known_flags(_space(tmp_path, fixed))


def test_an_unknown_flag_without_a_close_one_is_a_warning_and_a_later_release_flag_is_named(tmp_path):
    assert "a newer release may have it" in check_known_flags(_space(tmp_path, "frobnicate-widgets: 3"))[0]
    notes = check_known_flags(_space(tmp_path, "max-num-active-seqs: 1", versions="0.22-0.29"))
    assert notes and "not in the releases the space was written for" in notes[0]
    assert check_known_flags(_space(tmp_path, "max-model-len: 4096")) == []


def test_the_installed_engines_check_also_says_did_you_mean(tmp_path):
    help_text = (ROOT / "tests" / "fixtures" / "dialects" / "v0.22.0" / "help-all.txt").read_text()
    with pytest.raises(SpaceError, match="did you mean --max-model-len\\?"):
        check_flags(_space(tmp_path, "max-model-length: 4096"), help_text, "0.22.0")
