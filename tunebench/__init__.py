"""tunebench: a benchmark harness for LLM fine-tuning cost (throughput, memory, communication)."""

from tunebench.library_noise import silence_known_noise

__version__ = "0.1.0"

silence_known_noise()

# The Python API, imported on first use (PEP 562): `import tunebench` stays as quick as the CLI's start-up.
_API = {"Matrix": "tunebench.api.matrix", "MatrixOptions": "tunebench.api.matrix", "plan": "tunebench.api.planning",
        "InputError": "tunebench.errors", "InputProblem": "tunebench.errors"}
__all__ = sorted(_API)


def __getattr__(name: str):
    if name in _API:
        from importlib import import_module

        return getattr(import_module(_API[name]), name)
    raise AttributeError(f"module 'tunebench' has no attribute {name!r}")
