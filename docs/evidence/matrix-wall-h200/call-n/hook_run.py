"""Call N: benchmark.py's run with an import hook that prints the stack of the first import of the training stack."""

import sys
import time
import traceback

STACK = ("torch", "transformers", "trl", "peft", "datasets")
seen: set[str] = set()


class FirstImport:
    """A sys.meta_path finder that finds nothing: it only says who imports a module of the stack first."""

    def find_spec(self, name, path=None, target=None):
        if name in STACK and name not in seen:
            seen.add(name)
            stack = "".join(traceback.format_stack(limit=25))
            print(f"IMPORT {name} at {time.time():.3f}\n{stack}", file=sys.stderr, flush=True)
        return None


sys.meta_path.insert(0, FirstImport())
from tunebench.cli import main  # noqa: E402 - after the hook, so that the harness's own imports are seen

sys.exit(main(sys.argv[1:]))
