"""The imports every training entry needs, done once by the preload server (tunebench.execution.preload)."""

import accelerate  # noqa: F401
import datasets  # noqa: F401
import peft  # noqa: F401
import torch  # noqa: F401
import transformers  # noqa: F401
from trl import SFTTrainer  # noqa: F401

import scanner.callback  # noqa: F401
import tunebench.experiment.train  # noqa: F401
import tunebench.experiment.trainer  # noqa: F401
