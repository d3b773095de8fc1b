"""The environment a result was measured in: GPU, driver, package versions and tunebench's git sha."""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

logger = logging.getLogger(__name__)

_PACKAGES = ("torch", "transformers", "trl", "peft", "accelerate", "datasets")
# The caching allocator setting CUDA experiments run with unless the user sets PYTORCH_CUDA_ALLOC_CONF: expandable
# segments, whose reserve at a GPU's edge is measured (tunebench.planning.allocator_slack).
DEFAULT_ALLOC_CONF = "expandable_segments:True"


def cuda_alloc_conf() -> str:
    """The allocator setting of this harness's CUDA experiments: the user's PYTORCH_CUDA_ALLOC_CONF, else
    expandable segments."""
    return os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or DEFAULT_ALLOC_CONF


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
    repo = Path(__file__).resolve().parents[2]  # tunebench/telemetry/ → the repository
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


def environment_columns(device_type: str, gpus: list | None = None) -> dict[str, object]:
    """Environment columns; `gpus` as `gpus.query_gpus()` returns them (queried when None)."""
    from tunebench.telemetry.gpus import query_gpus

    gpus = query_gpus() if gpus is None else gpus
    return {
        "device_type": device_type,
        "gpu_name": gpus[0].name if gpus and device_type == "cuda" else None,
        "gpu_count": len(gpus),
        "driver_version": gpus[0].driver_version if gpus else None,
        "cuda_alloc_conf": cuda_alloc_conf() if device_type == "cuda" else None,
        **package_versions(),
        "cuda_version": _cuda_version(),
        "host_name": socket.gethostname(),
        "tunebench_git_sha": git_sha(),
    }


def _cuda_version() -> str | None:
    """The CUDA version torch was built with, where torch is already imported (the training entry)."""
    torch = sys.modules.get("torch")
    return getattr(getattr(torch, "version", None), "cuda", None) if torch is not None else None
