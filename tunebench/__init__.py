"""tunebench: a benchmark harness for LLM fine-tuning cost (throughput, memory, communication)."""

from tunebench.library_noise import silence_known_noise

__version__ = "0.1.0"

silence_known_noise()
