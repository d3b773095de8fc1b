"""Why a sharded row's per-rank peak is not below its one-GPU row's: the causes with their bytes, for `pred_note`.

Users shard to fit, and ask why two GPUs saved nothing (fms-hf-tuning#373). The usual answer is FSDP's float32
master weights: under bf16 mixed precision accelerate upcasts the trainable parameters of an FSDP model to float32
(fsdp2_prepare_model; FSDP1's flat parameters alike), so parameters, gradients and AdamW's two states take 16
bytes a parameter, sharded over the ranks, where one GPU keeps all of them in bf16 (8 bytes): at 2 GPUs a rank
holds as many bytes as the one GPU did (measured on H200: a 14B at 105.86 GiB a rank on 2 GPUs, 104.09 GiB on one).
The others: activations are not sharded (every rank runs its own micro-batch), and FSDP's gathered layers and
reduce buffers (temporaries) and FSDP1's flat gradients kept between steps (other) are per rank on top.
"""

from __future__ import annotations

import logging

from tunebench.planning.predict import memory_text, predict, shape_and_sharding

logger = logging.getLogger(__name__)

LEAD = "sharding saves nothing here"  # the note's start: the report finds the rows by it
STATE = ("pred_mem_params", "pred_mem_optimizer")


def note(experiment, shape, row: dict, cuda: bool, cache: dict | None, gpu_arch: int | None) -> str | None:
    """why_not_smaller for a planned row (`row`: its `pred_*` columns, for `shape`), the one-GPU row predicted here
    from the same experiment on one GPU at the same micro-batch (cached like the others); None for a row that
    does not shard."""
    import dataclasses

    if shape.fsdp is None or shape.world < 2 or not row.get("pred_mem_peak"):
        return None
    try:
        one_shape, one_sharding = shape_and_sharding(dataclasses.replace(experiment, num_gpus=1))
        one_shape = dataclasses.replace(one_shape, micro_batch=shape.micro_batch)
        one_gpu = predict(one_shape, one_sharding, cuda=cuda, cache=cache, gpu_arch=gpu_arch)
    except Exception as exc:  # the comparison is a note: the sharded row's own prediction stands without it
        logger.warning("no one-GPU comparison for %s: %s", experiment.folder_name, exc)
        return None
    return why_not_smaller(shape, row, one_gpu)


def master_weights(shape) -> bool:
    """Whether FSDP keeps float32 master weights of this row's trainable parameters: bf16/fp16 mixed precision over
    half-precision weights, and a base that is not quantized (accelerate upcasts none of a 4-bit model's)."""
    return (shape.fsdp is not None and shape.world > 1 and shape.autocast_bf16
            and shape.dtype in ("bfloat16", "float16") and shape.quantization is None)


def why_not_smaller(shape, sharded: dict, one_gpu: dict) -> str | None:
    """The note for a sharded row (`sharded`, per rank) whose peak is not below the same experiment's on one GPU
    (`one_gpu`), naming each cause with its bytes; None when sharding saved memory."""
    peak, single = sharded.get("pred_mem_peak"), one_gpu.get("pred_mem_peak")
    if shape.fsdp is None or shape.world < 2 or not peak or not single or peak < single:
        return None
    causes = []
    state, single_state = (sum(row.get(k) or 0 for k in STATE) for row in (sharded, one_gpu))
    # each cause where it weighs (a hundredth of the peak): a cause of a few MiB explains nothing. The master
    # weights are the trainable parameters', weighed by their AdamW state (a LoRA's adapters: a few MiB)
    if sharded.get("pred_mem_optimizer", 0) >= peak / 100 and master_weights(shape):
        causes.append(
            f"FSDP keeps float32 master weights (accelerate upcasts the trainable parameters to float32 under "
            f"{'bf16' if shape.dtype == 'bfloat16' else 'fp16'} mixed precision: parameters, gradients and AdamW "
            f"state at 16 bytes a parameter, sharded over {shape.world} ranks: parameters and optimizer state "
            f"{memory_text(state)} a rank, against {memory_text(single_state)} in {shape.dtype} on one GPU)")
    elif state >= peak / 100 and state >= single_state:
        causes.append(f"parameters and optimizer state {memory_text(state)} a rank, against "
                      f"{memory_text(single_state)} on one GPU")
    activations = sharded.get("pred_mem_activations") or 0
    if activations >= peak / 100 and activations >= 0.9 * (one_gpu.get("pred_mem_activations") or 0):
        causes.append(f"activations are not sharded: every rank runs its own micro-batch "
                      f"({memory_text(activations)} a rank)")
    extra = (sharded.get("pred_mem_temporaries") or 0) - (one_gpu.get("pred_mem_temporaries") or 0)
    if extra >= peak / 100:
        causes.append(f"FSDP's gathered layers and reduce buffers add {memory_text(extra)} of temporaries")
    kept = (sharded.get("pred_mem_other") or 0) - (one_gpu.get("pred_mem_other") or 0)
    if kept >= peak / 100:
        causes.append(f"FSDP1's flat gradients kept between steps add {memory_text(kept)}")
    causes = causes or ["no single cause weighs a hundredth of the peak"]
    # numbered, without semicolons: pred_note joins its notes with "; " and the report splits them so
    numbered = " ".join(f"({i}) {cause}" for i, cause in enumerate(causes, 1))
    return (f"{LEAD}: a rank's peak on {shape.world} GPUs ({memory_text(peak)}) is not below one GPU's "
            f"({memory_text(single)}): {numbered}").replace(";", ",")
