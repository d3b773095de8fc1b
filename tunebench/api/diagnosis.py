"""An OSError that ends a command, in one line naming its real cause: disk full, permission, read-only, the hub."""

from __future__ import annotations

import errno
import logging

from tunebench.execution.hub_access import network_cause

logger = logging.getLogger(__name__)

_KEPT = "nothing was left half-written and every finished experiment's results are kept"
# transformers and huggingface_hub raise OSError (or requests'/httpx's errors, OSErrors too) for a hub they cannot
# reach or a file a repository lacks: not a filesystem fault, whatever the type says.
_HUB_WORDS = ("huggingface.co", "hugging face hub", "hf_hub_offline", "offline mode", "repository not found",
              "is not a local folder and is not a valid model identifier", "gated repo")


def environment_line(exc: OSError) -> str:
    """The line printed for an OSError that reached the command line (exit 2)."""
    where = f": {exc.filename}" if exc.filename else ""
    text = str(exc.strerror or exc).splitlines()[0] if str(exc.strerror or exc) else type(exc).__name__
    cause = network_cause(exc)
    if cause or any(word in str(exc).lower() for word in _HUB_WORDS):
        return (f"tunebench: cannot load a model or dataset from the hub: {cause or text} (fix: connect to the hub; "
                "or set HF_HUB_OFFLINE=1 with the model in the hub cache; or use a local folder with config.json or "
                "a preset:<name>)")
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"tunebench: disk full{where}: {text} (fix: free space or choose --results_output_path on another " \
               f"disk); {_KEPT}"
    if exc.errno == errno.EROFS:
        return f"tunebench: read-only filesystem{where}: {text} (fix: choose a writable --results_output_path); {_KEPT}"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return f"tunebench: permission denied{where}: {text} (fix: choose a --results_output_path you may write, " \
               f"or fix the permissions of that path); {_KEPT}"
    return f"tunebench: system error{where}: {text} (fix: check that path and the machine's resources); {_KEPT}"
