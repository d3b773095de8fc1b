"""The environment a result was measured in: GPU, driver, package versions and tunebench's git sha."""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import shutil
import subprocess
from pathlib import Path

logger = logging.getLogger(__name__)

_PACKAGES = ("torch", "transformers", "trl", "peft", "accelerate", "datasets")


def package_versions() -> dict[str, str | None]:
    versions = {}
    for name in _PACKAGES:
        try:
            versions[f"{name}_version"] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[f"{name}_version"] = None
    return versions


@functools.lru_cache(maxsize=1)
def git_sha() -> str | None:
    repo = Path(__file__).resolve().parent.parent
    if not (repo / ".git").exists() or not shutil.which("git"):
        return None
    try:
        out = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return out + ("-dirty" if dirty else "")
    except (subprocess.SubprocessError, OSError):
        return None


def gpu_inventory() -> list[dict[str, str]]:
    """GPUs as nvidia-smi lists them (PCI order); [] without nvidia-smi. No CUDA initialisation here."""
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,name,driver_version,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout
    except (subprocess.SubprocessError, OSError) as exc:
        logger.warning("nvidia-smi failed (%s); treating this machine as having no GPU", exc)
        return []
    gpus = []
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 4 and parts[0].isdigit():
            gpus.append({"index": parts[0], "name": parts[1], "driver_version": parts[2], "memory_total_mib": parts[3]})
    return gpus


def environment_columns(device_type: str, gpus: list[dict[str, str]] | None = None) -> dict[str, object]:
    gpus = gpu_inventory() if gpus is None else gpus
    return {
        "device_type": device_type,
        "gpu_name": gpus[0]["name"] if gpus and device_type == "cuda" else None,
        "gpu_count": len(gpus),
        "driver_version": gpus[0]["driver_version"] if gpus else None,
        **package_versions(),
        "tunebench_git_sha": git_sha(),
    }
