"""tunebench: a benchmark harness for LLM fine-tuning cost (throughput, memory, communication)."""

__version__ = "0.1.0"
