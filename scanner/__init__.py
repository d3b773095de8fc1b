"""Scanner: a true memory, time and throughput breakdown of a transformers training step."""

# Lazy exports: `import scanner.options` (done by the autoinject sitecustomize at interpreter start) must not
# import torch or transformers.
_EXPORTS = {
    "Scanner": "callback",
    "ScanOptions": "options",
    "ScanReport": "report",
    "StepReport": "report",
    "merge_reports": "report",
}

__all__ = list(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module 'scanner' has no attribute {name!r}")
