"""The GPU multi-process launcher: `accelerate launch` with the matrix's accelerate config, one rank per GPU."""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from tunebench.execution.launchers.base import ENTRY_MODULE, LaunchCommand, entry_argv, environment, free_port
from tunebench.execution.launchers.python import PythonLauncher
from tunebench.experiment.spec import ExperimentSpec

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class AccelerateSettings:
    config_file: str | None = None  # --accelerate_config (accelerate.yaml); the framework config adds its own args


class AccelerateLauncher(PythonLauncher):
    name = "accelerate"

    def __init__(self, settings: AccelerateSettings | None = None):
        self.settings = settings or AccelerateSettings()

    def command(self, spec: ExperimentSpec, spec_path: Path, gpu_ids: list[int],
                extra_env: dict[str, str]) -> LaunchCommand:
        env, repro_env = environment(spec, gpu_ids, extra_env)
        arguments = entry_argv(spec_path)
        argv = [sys.executable, "-m", "accelerate.commands.launch"]
        if self.settings.config_file:
            argv += ["--config_file", str(Path(self.settings.config_file).resolve())]
        argv += ["--num_processes", str(spec.num_gpus), "--num_machines", "1", "--main_process_port", str(free_port())]
        for key, value in spec.framework_config.accelerate_args.items():
            argv += [f"--{key}", str(value)]
        return LaunchCommand([*argv, "-m", ENTRY_MODULE, *arguments], env, repro_env, os.getcwd(), arguments)
