"""Predictions for a whole matrix (cached per distinct step shape) and the `benchmark.py plan` table."""

from __future__ import annotations

import logging
from typing import Any

import pandas as pd

from tunebench.experiment.quantization import quantization_of
from tunebench.experiment.spec import ExperimentSpec
from tunebench.hardware.gpus import load_table
from tunebench.planning.allocator_slack import verdict_columns
from tunebench.planning.predict import memory_text, predict, shape_and_sharding
from tunebench.planning.sharding_notes import note as sharding_note

logger = logging.getLogger(__name__)

GIB = 1024**3


def plan_experiments(experiments: list[ExperimentSpec], capacity: int | None, host_budget: bool = False,
                     device_name: str | None = None, gpu_arch: int | None = None,
                     skipped: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """experiment_id → `pred_*` columns; a model the fake step cannot run gets empty columns and a warning.

    `capacity` is one GPU's memory; CPU experiments are judged against it only when `host_budget` (the user
    gave a size as --plan_device on a CPU matrix: a per-process memory budget). `gpu_arch`, the target's compute
    capability (planning.gpu_target), decides which attention kernels the GPU runs (planning.attention_kernels);
    without it, the GPU table's entry for `device_name`, else Hopper's. `skipped`: experiment_id → why the run would
    skip it (its settings cannot run as asked): no prediction, the reason in `pred_note`.
    """
    arch = gpu_arch if gpu_arch is not None else table_arch(device_name)
    cache: dict = {}
    out: dict[str, dict[str, Any]] = {}
    for experiment in experiments:
        if reason := (skipped or {}).get(experiment.experiment_id):
            logger.info("plan: %s not planned: the run would skip it: %s", experiment.folder_name, reason)
            out[experiment.experiment_id] = {"pred_mem_peak": None, "pred_fits": None,
                                             "pred_note": f"not planned: the run would skip it: {reason}"}
            continue
        try:
            shape, sharding = shape_and_sharding(experiment)
            shape, outliers = with_outlier_columns(experiment, shape)
            row = predict(shape, sharding, cuda=experiment.device_type == "cuda", cache=cache, gpu_arch=arch)
            cuda = experiment.device_type == "cuda"
            row.update(verdict_columns(row, capacity if cuda or host_budget else None, cuda, device_name,
                                       compiled=shape.compile_mode is not None))
            note = "; ".join(filter(None, [sharding_note(experiment, shape, row, cuda, cache, arch),
                                           unmodelled(experiment, outliers, shape)]))
            if note:
                row["pred_note"] = note
        except Exception as exc:  # a prediction never stops the matrix: the run will measure it
            logger.warning("no memory prediction for %s: %s", experiment.folder_name, exc)
            row = {"pred_mem_peak": None, "pred_fits": None,
                   "pred_note": f"no prediction: the fake step failed ({str(exc).splitlines()[0][:160]})"}
        logger.info("plan: %s peak %s", experiment.folder_name,
                    memory_text(row["pred_mem_peak"]) if row.get("pred_mem_peak") else "unknown")
        out[experiment.experiment_id] = row
    return out


def table_arch(device_name: str | None) -> int | None:
    """The compute capability the shipped GPU table gives `device_name` (None: not in it)."""
    gpu = load_table().lookup(device_name)
    return gpu.arch() if gpu else None


def with_outlier_columns(experiment: ExperimentSpec, shape):
    """The shape with 8-bit's outlier columns counted (planning.int8_outliers), and what to say about them: the
    count, or why there is none. Only a CUDA 8-bit row with a threshold splits columns off (bitsandbytes' CPU
    path dequantizes the weight instead)."""
    import dataclasses

    from tunebench.planning.int8_outliers import NotCalibrated, outlier_columns

    quantization = shape.quantization
    if (quantization is None or quantization.method != "bnb-8bit" or quantization.int8_threshold <= 0
            or experiment.device_type != "cuda"):
        return shape, None
    try:
        outliers = outlier_columns(experiment, shape)
    except NotCalibrated as reason:
        logger.warning("plan: 8-bit outlier columns of %s not counted: %s", experiment.folder_name, reason)
        return shape, f"not counted: {reason}"
    return dataclasses.replace(shape, int8_outliers=outliers), outliers.describe()


# Families whose mixers take fused CUDA kernels when these packages are installed (transformers checks at import);
# the fake step runs transformers' torch path, which the GPU evidence checked (lfm2, T in docs/evidence).
FUSED_MIXER_KERNELS = {
    "mamba": ("mamba_ssm", "causal_conv1d"), "mamba2": ("mamba_ssm", "causal_conv1d"),
    "falcon_mamba": ("mamba_ssm", "causal_conv1d"), "bamba": ("mamba_ssm", "causal_conv1d"),
    "falcon_h1": ("mamba_ssm", "causal_conv1d"), "granitemoehybrid": ("mamba_ssm", "causal_conv1d"),
    "jamba": ("mamba_ssm", "causal_conv1d"), "nemotron_h": ("mamba_ssm", "causal_conv1d"),
    "zamba": ("mamba_ssm", "causal_conv1d"), "zamba2": ("mamba_ssm", "causal_conv1d"),
    "lfm2": ("causal_conv1d",), "lfm2_moe": ("causal_conv1d",), "qwen3_next": ("fla", "causal_conv1d"),
}


def fused_mixer_kernels(model_name_or_path: str) -> list[str]:
    """The fused mixer kernels installed here that a run of this model would take instead of the torch path."""
    import importlib.util

    from tunebench.experiment.models import load_config

    try:
        model_type = getattr(load_config(model_name_or_path), "model_type", None)
    except (OSError, ValueError):  # no config to read here: the prediction says so on its own
        return []
    return [name for name in FUSED_MIXER_KERNELS.get(model_type, ()) if importlib.util.find_spec(name) is not None]


def unmodelled(experiment: ExperimentSpec, outliers: str | None = None, shape=None) -> str | None:
    """How the plan modelled what the experiment turns on, and what the fake step runs differently from it, said
    rather than hidden behind a confident figure: torch.compile, Liger and flex attention as planning.accelerations
    models them (or why not), fused mixer kernels installed here (transformers' torch path is planned), 8-bit's
    outlier columns (data-dependent: `outliers`, with_outlier_columns' word on them). A quantized row also says
    how its weights were sized."""
    from tunebench.experiment.models import load_config
    from tunebench.planning.accelerations import notes as acceleration_notes

    try:
        model_type = getattr(load_config(experiment.model_name_or_path), "model_type", None)
    except (OSError, ValueError):  # no config to read here: the prediction says so on its own
        model_type = None
    modelled, settings = acceleration_notes(experiment, shape or shape_and_sharding(experiment)[0], model_type)
    kernels = fused_mixer_kernels(experiment.model_name_or_path)
    if kernels:
        settings.append(f"the fused mixer kernels installed here ({', '.join(kernels)}); transformers' torch path "
                        "of the state-space/convolution mixers is predicted")
    if outliers is not None and outliers.startswith("not counted"):
        # measured on H100 (docs/evidence/acceleration-h100/int8_outliers.py): random-weight llama-3.1-8b, 2048
        # outlier columns a layer on average, +3.8 GB over none (the row's peak −8.6 %); llama-3.2-1b 355, +0.69 GB
        # (−1.8 %)
        settings.append(f"8-bit outlier columns (inputs above llm_int8_threshold, kept for backward in 16 bits: "
                        f"{outliers}; none predicted, so the peak is a lower bound)")
    notes = list(modelled)
    if quantization_of(experiment.entry.get("model", {})).enabled:
        notes.append("quantized base sized by fake tensors through bitsandbytes' own modules and fake kernels")
    if outliers is not None and not outliers.startswith("not counted"):
        notes.append(f"8-bit outlier columns kept for backward: {outliers}")
    if settings:
        notes.append("not modelled: " + "; ".join(settings))
    return "; ".join(notes) or None


def plan_table(experiments: list[ExperimentSpec], predictions: dict[str, dict[str, Any]]) -> pd.DataFrame:
    rows = []
    for e in experiments:
        p = predictions.get(e.experiment_id, {})
        rows.append({"scenario": e.scenario, "framework": e.framework_config.name, "model": e.model_name_or_path,
                     "gpus": e.num_gpus, "bs×ga": f"{e.micro_batch}×{e.grad_accum}",
                     **{f"{c} GiB": _gib(p, f"pred_mem_{c}") for c in ("params", "grads", "optimizer",
                                                                        "activations", "temporaries", "peak")},
                     "bound GiB": _gib(p, "pred_mem_peak_upper"), "reserved GiB": _gib(p, "pred_mem_reserved"),
                     "fits": p.get("pred_fits"), "margin GiB": _gib(p, "pred_fit_margin_bytes")})
    return pd.DataFrame(rows)


def _gib(row: dict[str, Any], key: str) -> float | None:
    """GiB to 3 significant digits (a tiny model's categories are not all 0.0)."""
    return None if row.get(key) is None else float(f"{row[key] / GIB:.3g}")


def table_notes(experiments: list[ExperimentSpec], predictions: dict[str, dict[str, Any]]) -> list[str]:
    """Lines printed under the plan table where a figure reads wrong without a word: a row the run would skip
    (why it has none), gradients of 0 GiB (a full fine-tuning row has as many gradients as parameters, just not at
    the peak)."""
    skipped = [f"{e.folder_name}: {note}" for e in experiments
               if str(note := predictions.get(e.experiment_id, {}).get("pred_note") or "").startswith("not planned")]
    zero = [e.folder_name for e in experiments if predictions.get(e.experiment_id, {}).get("pred_mem_grads") == 0]
    if not zero:
        return skipped
    return [*skipped, f"grads 0 GiB ({len(zero)} row(s), e.g. {zero[0]}): every column is its size at the "
            "step's peak, which comes before backward makes this step's first gradient (the last "
            "step's were freed by zero_grad(set_to_none=True)); they reach the trainable parameters' size later in "
            "backward, below the peak (with gradient accumulation > 1 they are there at the peak)"]
