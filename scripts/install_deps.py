"""Install tunebench's dependencies into the running interpreter without ever replacing an existing torch."""

import importlib.util
import subprocess
import sys
from pathlib import Path

CPU_TORCH = "torch==2.13.0"  # the CPU build on CPU machines; GPU images bring their own torch


def pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", *args], check=True)


def main() -> int:
    if importlib.util.find_spec("torch") is None:
        pip(CPU_TORCH)
    root = Path(__file__).resolve().parent.parent
    pip("-r", str(root / "requirements.txt"), *sys.argv[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
