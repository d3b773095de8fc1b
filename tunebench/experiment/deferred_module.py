"""A module named in sys.modules but executed only when first used: what the preload server does with bitsandbytes.

bitsandbytes reads every GPU's compute capability when imported, which initialises CUDA, and a fork of a process that
initialised CUDA cannot use CUDA. PEFT imports it whenever it is installed, so on a GPU machine with bitsandbytes the
preload server used to stop before PEFT and TRL, and each experiment imported them itself (8-9 s of every row's
start-up on an H200: issue AE). Holding bitsandbytes deferred lets the server import PEFT, TRL and the training entry
(their `import bitsandbytes as bnb` binds the placeholder); the fork that first reads an attribute of it, a QLoRA
experiment building its model, runs bitsandbytes' own import there, after the fork, where CUDA is its own.

Unlike importlib's LazyLoader, the placeholder answers the attributes that inspection reads (`__file__`, `__spec__`,
`__loader__`), so `inspect.getmodule`'s walk over sys.modules, which every torch custom op registration makes, does
not load it. It has no `__path__` of its own: importing a submodule asks for it, and so loads the package first, as
a normal import would.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import types

_lock = threading.RLock()


class DeferredModule(types.ModuleType):
    """Stands for a module not yet executed; the first attribute it lacks imports the real one and forwards to it."""

    def __getattr__(self, name: str):
        return getattr(self._tunebench_load(), name)

    def _tunebench_load(self) -> types.ModuleType:
        with _lock:
            real = self.__dict__.get("_tunebench_real")
            if real is None:
                if sys.modules.get(self.__name__) is self:
                    del sys.modules[self.__name__]  # the import below runs the module's own code and registers it
                real = importlib.import_module(self.__name__)
                self.__dict__["_tunebench_real"] = real
            return real


def defer(name: str) -> bool:
    """Put a placeholder for top-level module `name` in sys.modules, to be imported on first use; False (nothing done)
    when it is already imported or not installed."""
    if name in sys.modules or "." in name:
        return False
    spec = importlib.util.find_spec(name)
    if spec is None:
        return False
    placeholder = DeferredModule(name)
    placeholder.__spec__ = spec
    placeholder.__loader__ = spec.loader
    placeholder.__file__ = spec.origin
    placeholder.__package__ = name if spec.submodule_search_locations is not None else ""
    sys.modules[name] = placeholder
    return True


def loaded(name: str) -> bool:
    """Whether module `name` has run its own code in this process (a placeholder that was never used: False)."""
    module = sys.modules.get(name)
    if module is None:
        return False
    return not isinstance(module, DeferredModule) or "_tunebench_real" in module.__dict__
