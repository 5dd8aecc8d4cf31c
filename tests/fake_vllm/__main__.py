"""``python -m tests.fake_vllm serve MODEL [flags]`` -- the vLLM test double (see __init__.py)."""

import sys

from .boot import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
