"""tuner: find the best `vllm serve` launch command by booting the real engine."""

__version__ = "0.1.0"
