"""The imports every training entry needs, done once by the preload server (tunebench.execution.preload).

A fork of a process that initialised CUDA cannot use CUDA. bitsandbytes initialises it when imported on a
machine with GPUs (it reads every GPU's compute capability), and PEFT (so TRL) imports bitsandbytes whenever it
is installed. There the server imports only what does not touch CUDA, and each experiment imports the rest
itself (measured on H100 with bitsandbytes installed: every preloaded experiment failed with "Cannot
re-initialize CUDA in forked subprocess" before this split).
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


if importlib.util.find_spec("bitsandbytes") is None or not _gpus_visible():
    import peft  # noqa: F401
    from trl import SFTTrainer  # noqa: F401

    import scanner.callback  # noqa: F401
    import tunebench.experiment.train  # noqa: F401
    import tunebench.experiment.trainer  # noqa: F401
