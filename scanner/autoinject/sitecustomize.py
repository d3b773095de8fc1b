"""Zero-code mode: with this directory on PYTHONPATH and SCANNER_AUTOINJECT set, every Trainer gets a Scanner.

SCANNER_AUTOINJECT is "1" (defaults) or a JSON object of Scanner keyword options, e.g.
'{"steps": "5-7", "output": "/tmp/scan.json"}'. Without the variable this module only chains to the next
`sitecustomize` on sys.path. transformers is never imported here: a meta-path finder waits until the program
imports `transformers.trainer` itself and then wraps `Trainer.__init__`.
"""

import importlib.abc
import importlib.machinery
import importlib.util
import json
import logging
import os
import sys

logger = logging.getLogger(__name__)
ENV_VAR = "SCANNER_AUTOINJECT"
_HERE = os.path.dirname(os.path.abspath(__file__))


def _chain_next_sitecustomize() -> None:
    """Run the sitecustomize this file shadows (the next one on sys.path), as Python would have."""
    search = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", search)
    if spec is None or spec.loader is None or os.path.dirname(os.path.abspath(spec.origin or "")) == _HERE:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


def _options() -> dict:
    raw = os.environ.get(ENV_VAR, "").strip()
    if raw in ("", "0"):
        return {}
    if raw == "1":
        return {"_enabled": True}
    try:
        opts = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"{ENV_VAR} must be '1' or a JSON object of Scanner options; got {raw!r}: {exc}"
        ) from None
    if not isinstance(opts, dict):
        raise ValueError(f"{ENV_VAR} must be '1' or a JSON object of Scanner options; got {raw!r}")
    return {"_enabled": True, **opts}


def _patch_trainer(module, options: dict) -> None:
    trainer_cls = getattr(module, "Trainer", None)
    if trainer_cls is None or getattr(trainer_cls.__init__, "_scanner_patched", False):
        return
    original = trainer_cls.__init__

    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        import weakref

        from scanner import Scanner

        if not any(isinstance(cb, Scanner) for cb in self.callback_handler.callbacks):
            scanner = Scanner(**options)
            scanner.trainer_ref = weakref.ref(self)
            self.add_callback(scanner)

    __init__._scanner_patched = True
    trainer_cls.__init__ = __init__


class _TrainerImportHook(importlib.abc.MetaPathFinder):
    """Wraps the loader of `transformers.trainer` so the patch lands right after that module executes."""

    def __init__(self, options: dict):
        self.options = options

    def find_spec(self, fullname, path, target=None):
        if fullname != "transformers.trainer":
            return None
        sys.meta_path.remove(self)  # one-shot: find the real spec without recursing into ourselves
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        loader, options = spec.loader, self.options

        class _Loader(importlib.abc.Loader):
            def create_module(self, spec):
                return loader.create_module(spec)

            def exec_module(self, module):
                loader.exec_module(module)
                _patch_trainer(module, options)

        spec.loader = _Loader()
        return spec


def _install() -> None:
    opts = _options()
    if not opts:
        return
    opts.pop("_enabled")
    if importlib.util.find_spec("scanner") is None:  # running from a checkout: scanner/ is two levels up
        sys.path.append(os.path.dirname(os.path.dirname(_HERE)))
    from scanner.options import make_options  # validate now: a bad option fails at start, not mid-run

    make_options(**opts)
    if "transformers.trainer" in sys.modules:
        _patch_trainer(sys.modules["transformers.trainer"], opts)
    else:
        sys.meta_path.insert(0, _TrainerImportHook(opts))


_chain_next_sitecustomize()
try:
    _install()
except ValueError as exc:
    # Python would print a sitecustomize error and carry on without the scanner; a benchmark run with bad
    # scanner options must stop instead, with the message.
    raise SystemExit(f"scanner autoinject: {exc}") from None
