"""What runs on a Ray worker (an experiment, or one node's part of one) and how its folder comes back to the driver.

A task runs the normal launch path (`run_one`) on its node. With `--ray_transfer object` it runs in a scratch
folder and returns that folder as a tar archive, which the driver unpacks into the results folder; with
`shared` it writes straight into the results folder (the same path on every node).
"""

from __future__ import annotations

import io
import logging
import shutil
import tarfile
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from tunebench.execution.executors.ray_settings import RaySettings
from tunebench.execution.experiment_run import RunOptions, run_one
from tunebench.execution.launchers.base import free_port
from tunebench.experiment.spec import ExperimentSpec

logger = logging.getLogger(__name__)


def run_task(experiment: ExperimentSpec, options: RunOptions) -> tuple[dict[str, Any], bytes | None, dict[str, Any]]:
    """Runs on a Ray worker: the experiment (this node's part with `options.node`) through the normal launch
    path; returns (row, folder tar or None when shared, where)."""
    import ray

    started = time.time()
    gpu_ids = [int(g) for g in ray.get_gpu_ids()] if experiment.device_type == "cuda" else []
    shared = options.settings_of(RaySettings).transfer == "shared"
    scratch = None if shared else Path(tempfile.mkdtemp(prefix="tunebench-ray-"))
    node_options = replace(options, output_dir=options.output_dir if shared else scratch, preload=False)
    try:
        row = run_one(experiment, gpu_ids, node_options)
        archive = None
        if not shared:
            buffer = io.BytesIO()
            with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
                tar.add(scratch / experiment.folder_name, arcname=experiment.folder_name,
                        filter=lambda info: None if "trainer_output" in info.name else info)
            archive = buffer.getvalue()
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    where = {"node": ray.util.get_node_ip_address(), "gpus": gpu_ids, "start": started, "end": time.time()}
    return row, archive, where


def rendezvous_point() -> tuple[str, int]:
    """Runs in the first bundle of an experiment spanning nodes: this node's address and a port free on it, where
    global rank 0 will listen."""
    import ray

    return ray.util.get_node_ip_address(), free_port(every_interface=True)


def unpack(archive: bytes, output_dir: Path) -> None:
    """A task's folder archive into the results folder ("data" filter: no links out, no absolute paths)."""
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        tar.extractall(output_dir, filter="data")
