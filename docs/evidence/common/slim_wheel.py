"""A wheel without the parts a device call does not need, so it and the repository fit one call's 64 MiB carry:
bitsandbytes with only the native libraries a CUDA 13 device needs (CPU, CUDA 13.x, XPU: 41 MiB -> 7 MiB), or Ray
without its Java workers, its dashboard's web client and RLlib (79 MB -> 43 MB; Ray's core, raylet and GCS stay).

    python docs/evidence/common/slim_wheel.py FULL.whl OUT_DIR   # -> OUT_DIR/<same name>.whl (the kind from the name)

What is left out is dropped from the wheel's RECORD too, so pip installs it as is.
"""

from __future__ import annotations

import re
import sys
import zipfile
from pathlib import Path

DROP = {
    "bitsandbytes": re.compile(r"libbitsandbytes_(cuda1[12]\d|rocm\d+)\.so"),
    "ray": re.compile(r"^ray/(jars|rllib)/|^ray/dashboard/client/build/"),
}


def slim(source: Path, folder: Path) -> Path:
    kind = source.name.split("-")[0]
    drop = DROP[kind]
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / source.name
    with zipfile.ZipFile(source) as full, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as out:
        for info in full.infolist():
            if drop.search(info.filename):
                continue
            data = full.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                data = "".join(
                    line for line in data.decode().splitlines(keepends=True) if not drop.search(line)
                ).encode()
            out.writestr(info, data)
    return target


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    print(slim(Path(sys.argv[1]), Path(sys.argv[2])))
