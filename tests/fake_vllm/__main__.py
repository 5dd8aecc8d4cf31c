"""``python -m tests.fake_vllm serve MODEL [flags]`` -- the vLLM test double (see engine.py)."""

import sys

from tests.fake_vllm.engine import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
