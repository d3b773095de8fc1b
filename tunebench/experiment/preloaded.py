"""The imports every training entry needs, done once by the preload server (tunebench.execution.preload).

A fork of a process that initialised CUDA cannot use CUDA. bitsandbytes initialises it when imported on a
machine with GPUs (it reads every GPU's compute capability), and PEFT (so TRL) imports bitsandbytes whenever it
is installed (measured on H100: every preloaded experiment failed with "Cannot re-initialize CUDA in forked
subprocess"). There the server holds bitsandbytes deferred (tunebench.experiment.deferred_module): PEFT, TRL and
the entry are imported here all the same, and bitsandbytes runs its own import in the experiment that first uses
it. (Before, the server stopped short of PEFT and TRL there, and each experiment paid 8-9 s of imports: issue AE.)
"""

import importlib.util

import accelerate  # noqa: F401
import datasets  # noqa: F401
import torch
import transformers  # noqa: F401


def _gpus_visible() -> bool:
    """Whether a GPU is present, asked through NVML: torch.cuda.is_available() would itself poison every fork
    (torch marks a process that counted CUDA devices as one whose forks cannot use CUDA)."""
    if torch.version.cuda is None and torch.version.hip is None:
        return False  # a CPU build of torch: bitsandbytes will not touch a GPU (NVML says -1 there)
    try:
        return torch.cuda._device_count_nvml() != 0  # -1: NVML could not say, so assume a GPU
    except Exception:
        return True


_held = False  # bitsandbytes held deferred in this process
if importlib.util.find_spec("bitsandbytes") is not None and _gpus_visible():
    from tunebench.experiment.deferred_module import defer

    # Not torch.compile's modules either, although bitsandbytes imports them (a lazy torch.compile wrapper of its
    # kernels) and they are most of its import on the CPU: importing them here made every fork unusable for CUDA on
    # an H200 (each experiment fell back to a new interpreter: docs/evidence/matrix-wall-h200.md, call E).
    _held = defer("bitsandbytes")

import peft  # noqa: E402, F401
from trl import SFTTrainer  # noqa: E402, F401

import scanner.callback  # noqa: E402, F401
import tunebench.experiment.train  # noqa: E402, F401
import tunebench.experiment.trainer  # noqa: E402, F401

if _held:  # a LoRA experiment that quantizes nothing then never imports bitsandbytes (peft_bitsandbytes.py)
    from tunebench.experiment.peft_bitsandbytes import answer_from_the_version

    try:
        answer_from_the_version()
    except Exception as exc:  # noqa: BLE001 - a server that dies here forks nothing: PEFT's own check stays
        import logging

        logging.getLogger(__name__).warning("PEFT will import bitsandbytes in every LoRA experiment (%r)", exc)
