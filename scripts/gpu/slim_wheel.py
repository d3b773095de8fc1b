"""A bitsandbytes wheel with only the native libraries a CUDA 13 device needs (CPU, CUDA 13.x, XPU), so it and
the repository fit one device call's 64 MiB carry (the full 0.50.2 wheel is 41 MiB, this one 7 MiB).

    python scripts/gpu/slim_wheel.py FULL.whl OUT_DIR      # -> OUT_DIR/<same name>.whl

The libraries left out (CUDA 11.8-12.8, ROCm) are dropped from the wheel's RECORD too, so pip installs it as is.
"""

from __future__ import annotations

import re
import sys
import zipfile
from pathlib import Path

DROP = re.compile(r"libbitsandbytes_(cuda1[12]\d|rocm\d+)\.so")


def slim(source: Path, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / source.name
    with zipfile.ZipFile(source) as full, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as out:
        for info in full.infolist():
            if DROP.search(info.filename):
                continue
            data = full.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                data = "".join(line for line in data.decode().splitlines(keepends=True) if not DROP.search(line)).encode()
            out.writestr(info, data)
    return target


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    print(slim(Path(sys.argv[1]), Path(sys.argv[2])))
