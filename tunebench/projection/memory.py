"""The memory verdict of a projected experiment: its spec.json re-planned for the target GPU and N ranks.

The experiment folder's spec.json holds the resolved, typed values the run used; the projection rebuilds the
ExperimentSpec from it, sets the GPU count and the parallelism (DDP: N > 1 without FSDP; FSDP2: accelerate's
`fsdp`/`fsdp_config` of the `fsdp2` framework config), and asks the same planning as `benchmark.py plan` (the fake
step; FSDP's sharding is analytic there, see planning.predict) for `pred_*` against the target's capacity.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tunebench.experiment.spec import SPEC_FILE, ExperimentSpec, FrameworkConfig
from tunebench.hardware.gpus import Gpu
from tunebench.readback import load_json

logger = logging.getLogger(__name__)

FSDP2 = {"fsdp": True,
        "fsdp_config": {"version": 2, "auto_wrap_policy": "TRANSFORMER_BASED_WRAP", "reshard_after_forward": True}}


def spec_of(folder: Path) -> ExperimentSpec:
    """The experiment as it ran, from its folder's spec.json (ValueError naming the file when unreadable)."""
    data = load_json(folder / SPEC_FILE, dict)
    detail = data.get("framework_config_detail") or {"name": data.get("framework_config", "none")}
    framework = FrameworkConfig(**{k: v for k, v in detail.items() if k in FrameworkConfig.__dataclass_fields__})
    return ExperimentSpec(scenario=data["scenario"], framework_config=framework, num_gpus=int(data["num_gpus"]),
                          device_type=data["device_type"], arguments=dict(data["arguments"]),
                          effective_batch_size=data.get("effective_batch_size"), entry=data["entry"])


def on_ranks(spec: ExperimentSpec, n: int, parallelism: str | None) -> ExperimentSpec:
    """The same experiment on `n` GPUs, data parallel (`ddp`) or sharded (`fsdp2`), or with its own parallelism
    (a run measured on several GPUs: its FSDP settings stay but on one GPU); the per-device batch stays."""
    from tunebench.experiment.sharding import parallelism_of

    entry = copy.deepcopy(spec.entry)
    training = entry.setdefault("training", {})
    name = spec.framework_config.name
    if spec.num_gpus > 1 and parallelism == parallelism_of(spec.num_gpus, training) and n > 1:
        return ExperimentSpec(scenario=spec.scenario, framework_config=spec.framework_config, num_gpus=n,
                              device_type=spec.device_type, arguments=dict(spec.arguments),
                              effective_batch_size=spec.effective_batch_size, entry=entry)
    training.pop("fsdp", None)
    training.pop("fsdp_config", None)
    if parallelism == "fsdp2" and n > 1:
        training.update(copy.deepcopy(FSDP2))
        name = "fsdp2"
    elif parallelism == "ddp" and n > 1:
        name = "ddp"
    framework = FrameworkConfig(name, dict(spec.framework_config.arguments), spec.framework_config.description)
    return ExperimentSpec(scenario=spec.scenario, framework_config=framework, num_gpus=n, device_type=spec.device_type,
                          arguments=dict(spec.arguments), effective_batch_size=spec.effective_batch_size, entry=entry)


def verdict(folder: Path, n: int, parallelism: str | None, capacity: int | None, device_name: str | None,
            device_type: str = "cuda") -> dict[str, Any]:
    """`pred_*` columns of the experiment on `n` ranks of the target (empty with a `pred_note` when it fails)."""
    from dataclasses import replace

    from tunebench.planning.plan_matrix import plan_experiments

    try:
        spec = replace(on_ranks(spec_of(folder), n, parallelism), device_type=device_type)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return {"pred_note": f"no memory prediction: {folder / SPEC_FILE} unreadable ({exc})"[:300]}
    return plan_experiments([spec], capacity, device_name=device_name)[spec.experiment_id]


def with_verdicts(frame, folders: Mapping[tuple, Path], target: Gpu, parallelism: str | None):
    """`frame` (projected rows) with the memory verdict of each row's experiment on the target: `proj_mem_peak`,
    `proj_fits` and the `pred_*` columns (empty where the row's experiment folder is unknown). A row measured on
    several GPUs is re-planned with its own parallelism, a one-GPU row with `parallelism`."""
    import pandas as pd

    capacity = target.capacity_bytes()
    verdicts = []
    for _, row in frame.iterrows():
        folder = folders.get((row.get("experiment_id"), int(row.get("repeat", 1) or 1)))
        count = int(row.get("proj_num_gpus") or 1)
        own = row.get("proj_source_parallelism") if int(row.get("proj_source_num_gpus") or 1) > 1 else None
        found = verdict(folder, count, own or parallelism, capacity, target.name) if folder else {}
        verdicts.append({"proj_mem_peak": found.get("pred_mem_peak"), "proj_fits": found.get("pred_fits"), **found})
    return pd.concat([frame, pd.DataFrame(verdicts, index=frame.index)], axis=1)
