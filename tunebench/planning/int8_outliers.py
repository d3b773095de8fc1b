"""LLM.int8's outlier columns, counted by a real forward: the data-dependent part of an 8-bit step's memory.

bitsandbytes' 8-bit matmul keeps every input column that holds a value of at least `llm_int8_threshold` (6.0 by
default; compared in float16) in 16 bits, and keeps those columns (tokens × columns) for backward. On the random-
weight llama-3.1-8b that was 3.8 GB at 4 × 1024 tokens, 8.6 % of the step's peak (docs/evidence/
acceleration-h100.md). The count depends on the weights and the tokens, which fake tensors do not have, so the plan
measures it: the model in its dtype on this host's GPU, or its CPU without one (a preset's random init from the
run's seed on the run's device, so the run's own weights; a folder's checkpoint), one forward without gradients
over a micro-batch of the experiment's own data, and for every layer the quantizer converts, the number of columns
whose largest magnitude reaches the threshold. The counts are cached
on disk per model, dtype, seed, batch, data and threshold, so a matrix pays once.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path

from tunebench.fileio import cache_dir, write_atomic

logger = logging.getLogger(__name__)

CACHE_VERSION = 1
HOST_SHARE = 0.8  # of a device's free memory the weights may take: the forward's activations need the rest
CHILD_TIMEOUT = 1800


@dataclass(frozen=True)
class OutlierColumns:
    """Per 8-bit layer (by module name, as in the unwrapped model), how many input columns the batch split off."""

    columns: tuple[tuple[str, int], ...]
    tokens: int  # rows of the calibration micro-batch times its length

    def total(self) -> int:
        return sum(count for _, count in self.columns)

    def describe(self) -> str:
        counts = [count for _, count in self.columns]
        mean = self.total() / len(counts) if counts else 0.0
        return (f"{self.total():,} outlier columns over {len(counts)} 8-bit layers (mean {mean:.0f}, "
                f"max {max(counts, default=0)}), counted by a forward of {self.tokens:,} tokens of the data")


class NotCalibrated(Exception):
    """The count cannot be measured here (the reason is the message): the prediction says so."""


def converted_layers(model_name: str, dtype: str, quantization) -> tuple[list[str], int]:
    """Names of the linear layers transformers' bitsandbytes quantizer converts, and the unquantized weights'
    bytes (what the counting forward holds): from a meta model, so no memory."""
    import torch
    from transformers import AutoModelForCausalLM

    from tunebench.experiment.models import load_config
    from tunebench.planning.quantized import quantize_meta

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(load_config(model_name), dtype=getattr(torch, dtype))
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    quantize_meta(model, quantization, getattr(torch, dtype))
    return [name for name, module in model.named_modules() if type(module).__name__ == "Linear8bitLt"], weights


def count_columns(model, layers: list[str], batch: dict, threshold: float) -> dict[str, int]:
    """Run `model` on `batch` without gradients; for each named layer, the input columns whose largest magnitude
    (as float16, the dtype bitsandbytes compares in) is at least `threshold`. A layer called more than once (a
    shared module) counts the columns of its largest call, the split that costs the most."""
    import torch

    found: dict[str, int] = dict.fromkeys(layers, 0)
    modules = dict(model.named_modules())
    missing = [name for name in layers if name not in modules]
    if missing:
        raise NotCalibrated(f"the model has no layer {missing[0]!r} that the quantizer converts")

    def counter(name):
        def hook(module, args):
            flat = args[0].reshape(-1, args[0].shape[-1])
            columns = (flat.to(torch.float16).abs() >= threshold).any(dim=0).sum().item()
            found[name] = max(found[name], int(columns))
        return hook

    handles = [modules[name].register_forward_pre_hook(counter(name)) for name in layers]
    try:
        with torch.no_grad():
            decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
            # The decoder alone when the output layer is not converted (transformers never converts it): the
            # logits (rows × length × vocabulary) would be the forward's largest tensor, and are not needed.
            prefix = _prefix(model, decoder)
            head_converted = any(not name.startswith(prefix) for name in layers)
            runner = model if decoder is None or head_converted else decoder
            runner(**batch, use_cache=False)
    finally:
        for handle in handles:
            handle.remove()
    return found


def _prefix(model, decoder) -> str:
    if decoder is None:
        return ""
    for name, module in model.named_modules():
        if module is decoder:
            return name + "."
    return ""


def calibration_batch(experiment, micro_batch: int) -> dict:
    """`micro_batch` rows of the experiment's own tokenised data (the run's cache), padded on the right to the
    longest as the collator pads, with the attention mask."""
    import torch

    from tunebench.experiment.arguments import DataArguments
    from tunebench.experiment.data import prepare_dataset
    from tunebench.experiment.models import build_tokenizer

    data = DataArguments(**experiment.entry.get("data", {}))
    model_name = experiment.entry.get("model", {}).get("model_name_or_path", "preset:llama-tiny")
    tokenizer = build_tokenizer(model_name)
    text_field = experiment.value("training", "dataset_text_field") or "text"
    dataset = prepare_dataset(data, tokenizer, text_field, seed=experiment.value("training", "seed"))
    rows = [list(row)[: data.max_seq_len] for row in dataset[: micro_batch]["input_ids"]]
    if not rows:
        raise NotCalibrated("the training data has no rows")
    longest = max(len(row) for row in rows)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids = torch.tensor([row + [pad] * (longest - len(row)) for row in rows])
    mask = torch.tensor([[1] * len(row) + [0] * (longest - len(row)) for row in rows])
    return {"input_ids": ids, "attention_mask": mask}


def outlier_columns(experiment, shape) -> OutlierColumns:
    """The experiment's outlier columns per 8-bit layer: from the cache, else measured (NotCalibrated when no
    device here can hold the model, or the forward fails)."""
    quantization = shape.quantization
    batch = calibration_batch(experiment, shape.micro_batch)
    key = _cache_key(experiment, shape, batch)
    path = cache_dir("int8-outliers") / f"{key}.json"
    if path.is_file():
        try:
            saved = json.loads(path.read_text())
            return OutlierColumns(tuple((name, int(count)) for name, count in saved["columns"]), int(saved["tokens"]))
        except (OSError, ValueError, KeyError, TypeError):
            logger.warning("unreadable outlier-column cache %s: measuring again", path)
    layers, weights = converted_layers(shape.model, shape.dtype, quantization)
    gpu_init = experiment.device_type == "cuda" and experiment.value("model", "preset_init_device") != "cpu"
    request = {"model": shape.model, "dtype": shape.dtype, "attn": shape.attn_implementation, "layers": layers,
               "threshold": quantization.int8_threshold, "seed": experiment.value("training", "seed"),
               "weights": weights, "gpu": experiment.device_type == "cuda", "gpu_init": gpu_init}
    counts = _measure(request, batch)
    result = OutlierColumns(tuple((name, counts[name]) for name in layers), int(batch["input_ids"].numel()))
    write_atomic(path, json.dumps({"columns": [list(pair) for pair in result.columns], "tokens": result.tokens}))
    logger.info("plan: %s", result.describe())
    return result


def _measure(request: dict, batch: dict) -> dict[str, int]:
    """Count in a child process: on this host's GPU when the experiment trains on one and one is here (seconds,
    and a preset's weights are then the run's own: the same seed on the same device), else on the CPU. A child,
    so the harness never holds a CUDA context (its memory would be missing from every experiment after it)."""
    import os
    import subprocess
    import sys
    import tempfile

    import torch

    with tempfile.TemporaryDirectory(prefix="tunebench-int8-") as folder:
        torch.save(batch, Path(folder) / "batch.pt")
        (Path(folder) / "request.json").write_text(json.dumps(request))
        try:
            done = subprocess.run(
                [sys.executable, "-m", __name__, folder, str(os.getpid())],
                capture_output=True,
                text=True,
                timeout=CHILD_TIMEOUT,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise NotCalibrated(f"the forward that counts them took over {CHILD_TIMEOUT} s") from exc
        answer = Path(folder) / "counts.json"
        if done.returncode != 0 or not answer.is_file():
            last = (done.stderr.strip().splitlines() or ["no output"])[-1][:200]
            raise NotCalibrated(f"the forward that counts them failed ({last})")
        found = json.loads(answer.read_text())
    if "problem" in found:
        raise NotCalibrated(found["problem"])
    logger.info("plan: 8-bit outlier columns counted on %s", found["device"])
    return {name: int(count) for name, count in found["counts"].items()}


def _count_here(folder: Path) -> dict:
    """The child's work (see _measure): {counts, device}, or {problem} when no device can hold the weights."""
    import torch
    from transformers import set_seed

    from tunebench.experiment.models import load_model

    request = json.loads((folder / "request.json").read_text())
    batch = torch.load(folder / "batch.pt", weights_only=True)
    device = "cpu"
    if request["gpu"] and torch.cuda.is_available():
        free, _ = torch.cuda.mem_get_info()
        if request["weights"] <= HOST_SHARE * free:
            device = "cuda:0"
    if device == "cpu":
        available = _available_bytes()
        if available is not None and request["weights"] > HOST_SHARE * available:
            return {"problem": f"the weights ({request['weights'] / 1024**3:.1f} GiB) fit neither a GPU here nor "
                               f"this host's available memory ({available / 1024**3:.1f} GiB) for the forward that "
                               "counts them"}
    set_seed(request["seed"])  # as the run seeds before its random init
    init = device if request["gpu_init"] else "cpu"
    model = load_model(request["model"], request["dtype"], request["attn"], init_device=init).to(device)
    model.eval()  # no dropout: the values as trained are what the count sees
    batch = {name: tensor.to(device) for name, tensor in batch.items()}
    return {"counts": count_columns(model, request["layers"], batch, request["threshold"]), "device": device}


def _available_bytes() -> int | None:
    """The host memory available to a new process (MemAvailable on Linux); None where unknown."""
    import psutil

    try:
        return int(psutil.virtual_memory().available)
    except (OSError, RuntimeError):
        return None


def _cache_key(experiment, shape, batch) -> str:
    from tunebench.experiment.models import load_config

    config = load_config(shape.model).to_dict()
    weights = _weights_identity(shape.model)
    devices = [experiment.device_type, experiment.value("model", "preset_init_device")]  # where the count runs
    payload = {"version": CACHE_VERSION, "config": config, "weights": weights, "dtype": shape.dtype, "devices": devices,
               "seed": experiment.value("training", "seed"), "attn": shape.attn_implementation,
               "threshold": shape.quantization.int8_threshold,
               "batch": hashlib.sha256(batch["input_ids"].numpy().tobytes()).hexdigest()}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:20]


def _weights_identity(model: str) -> list:
    """A checkpoint's files by name, size and modification time (a random init has none: its seed decides)."""
    folder = Path(model)
    if not folder.is_dir():
        return []
    return sorted([p.name, p.stat().st_size, p.stat().st_mtime_ns] for p in folder.glob("*.safetensors")) + \
        sorted([p.name, p.stat().st_size, p.stat().st_mtime_ns] for p in folder.glob("*.bin"))


def die_with_parent(parent: int) -> None:
    """Have the kernel end this process when its parent dies, however the parent was stopped (SIGKILL included,
    which no handler sees): the count never outlives the harness. Linux only (prctl); elsewhere the parent's
    timeout bounds it."""
    import ctypes
    import os
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


if __name__ == "__main__":
    import sys

    die_with_parent(int(sys.argv[2]))
    target = Path(sys.argv[1])
    write_atomic(target / "counts.json", json.dumps(_count_here(target)))
