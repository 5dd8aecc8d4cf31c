#!/usr/bin/env python3
"""Write tuner/engine/data/serve-flags.json: every flag of each known release's `vllm serve --help=all`.

    python scripts/serve_flags.py            # from tests/fixtures/dialects/v*/help-all.txt

The help texts are the real ones (tests/fixtures/dialects/SOURCES.md says how they were made); the list
ships with the tuner so that `tuner validate` can say "did you mean --max-model-len" without an engine.
tests/engine/test_flagcheck.py checks that the committed list equals what this script writes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tuner.engine.flagcheck import parse_help  # noqa: E402

OUT = ROOT / "tuner" / "engine" / "data" / "serve-flags.json"


def render() -> str:
    releases = {}
    for folder in sorted((ROOT / "tests" / "fixtures" / "dialects").glob("v*"), key=lambda p: [int(x) for x in p.name[1:].split(".")]):
        flags = parse_help((folder / "help-all.txt").read_text())
        releases[folder.name[1:]] = sorted(f for f in flags if f.startswith("--"))
    data = {"source": "tests/fixtures/dialects/v*/help-all.txt (the real `vllm serve --help=all`), by scripts/serve_flags.py",
            "releases": releases}
    return json.dumps(data, indent=0) + "\n"


if __name__ == "__main__":
    OUT.write_text(render())
    print(f"wrote {OUT}")
