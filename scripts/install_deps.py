"""Install tunebench's dependencies into the running interpreter without ever replacing an existing torch
(`--fms`: fms-acceleration's plugins too, without their numpy<2 pin)."""

import importlib.util
import subprocess
import sys
import time
from pathlib import Path

CPU_TORCH = "torch==2.13.0"  # the CPU build on CPU machines; GPU images bring their own torch
# fms-acceleration and the plugins tunebench runs (docs/from-fms.md), at the versions measured. Installed without
# their dependencies: their metadata pins numpy<2, which their code does not need, and a plain install would
# downgrade numpy under torch and pandas. What they do import is installed beside them.
FMS_PACKAGES = ["fms-acceleration==0.6.4", "fms-acceleration-peft==0.4.4", "fms-acceleration-foak==0.7.4"]
FMS_IMPORTS = ["threadpoolctl>=3.5", "bitsandbytes>=0.50.2"]


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
    extra = [a for a in sys.argv[1:] if a != "--fms"]
    pip("requirements.txt (transformers, TRL, PEFT, accelerate, pandas, ...)", "-r",
        str(root / "requirements.txt"), *extra)
    if "--fms" in sys.argv[1:]:
        pip("fms-acceleration and its peft/foak plugins (--no-deps: numpy is kept)", "--no-deps", *FMS_PACKAGES)
        pip("what the fms plugins import (threadpoolctl, bitsandbytes)", *FMS_IMPORTS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
