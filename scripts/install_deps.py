"""Install tunebench's dependencies into the running interpreter without ever replacing an existing torch."""

import importlib.util
import subprocess
import sys
import time
from pathlib import Path

CPU_TORCH = "torch==2.13.0"  # the CPU build on CPU machines; GPU images bring their own torch


def pip(what: str, *args: str) -> None:
    """One pip install, announced first: a quiet pip downloading torch looks like a hang for minutes."""
    print(f"install_deps: installing {what} ...", flush=True)
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", *args], check=True)
    print(f"install_deps: {what} done ({time.monotonic() - started:.0f} s)", flush=True)


def main() -> int:
    if importlib.util.find_spec("torch") is None:
        pip(f"{CPU_TORCH} (CPU build, ~200 MB: the longest step, 1-3 min)", CPU_TORCH)
    else:
        print("install_deps: torch is present, kept as it is", flush=True)
    root = Path(__file__).resolve().parent.parent
    pip("requirements.txt (transformers, TRL, PEFT, accelerate, pandas, ...)", "-r",
        str(root / "requirements.txt"), *sys.argv[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
