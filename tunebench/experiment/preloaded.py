"""The imports every training entry needs, done once by the preload server (tunebench.execution.preload).

A fork of a process that initialised CUDA cannot use CUDA. bitsandbytes initialises it when imported on a
machine with GPUs (it reads every GPU's compute capability), and PEFT (so TRL) imports bitsandbytes whenever it
is installed (measured on H100: every preloaded experiment failed with "Cannot re-initialize CUDA in forked
subprocess"). So the server holds bitsandbytes deferred (tunebench.experiment.deferred_module): PEFT, TRL and the
entry are imported here all the same, and bitsandbytes runs its own import in the experiment that first uses it.
(Before, the server stopped short of PEFT and TRL there, and each experiment paid 8-9 s of imports: issue AE.)
Without GPUs it is held too: it was 0.9 s of the server's 4.5 s of imports on the 2-core machine, paid by every run
while only a quantized experiment uses it.
"""

import importlib.util

import accelerate  # noqa: F401
import datasets  # noqa: F401
import torch  # noqa: F401
import transformers  # noqa: F401

_held = False  # bitsandbytes held deferred in this process
if importlib.util.find_spec("bitsandbytes") is not None:
    from tunebench.experiment.deferred_module import defer

    # Not torch.compile's modules either, although bitsandbytes imports them (a lazy torch.compile wrapper of its
    # kernels): importing them here made every fork unusable for CUDA on an H200 (each experiment fell back to a
    # new interpreter: docs/evidence/matrix-wall-h200.md, call E).
    _held = defer("bitsandbytes")

import peft  # noqa: E402, F401
from trl import SFTTrainer  # noqa: E402, F401

import scanner.callback  # noqa: E402, F401
import tunebench.experiment.train  # noqa: E402, F401
import tunebench.experiment.trainer  # noqa: E402, F401

try:  # transformers builds its table of checkpoint conversions (a thousand regular expressions) on first use:
    # PEFT's LoRA wrap, a model's load. 0.2 s of each such experiment on the 2-core machine; built once here.
    from transformers.conversion_mapping import get_checkpoint_conversion_mapping

    get_checkpoint_conversion_mapping("llama")
except Exception:  # noqa: BLE001 - a transformers without it: each experiment builds what it uses, as before
    pass

if _held:  # a LoRA experiment that quantizes nothing then never imports bitsandbytes (peft_bitsandbytes.py)
    from tunebench.experiment.peft_bitsandbytes import answer_from_the_version

    try:
        answer_from_the_version()
    except Exception as exc:  # noqa: BLE001 - a server that dies here forks nothing: PEFT's own check stays
        import logging

        logging.getLogger(__name__).warning("PEFT will import bitsandbytes in every LoRA experiment (%r)", exc)
