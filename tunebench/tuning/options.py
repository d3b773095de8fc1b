"""What `tune` searches for and how: TuneOptions, typed (the command line reads them in tunebench.cli.tune;
tunebench.tune checks them as it does, each problem naming the option)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from tunebench.vocabulary import Device, Objective

logger = logging.getLogger(__name__)

OBJECTIVES = {  # objective -> (the results column it is computed from, its unit)
    Objective.TOKENS_PER_SECOND: ("steady_nonpad_tokens_per_second", "tokens/s"),
    Objective.JOULES_PER_TOKEN: ("steady_energy_joules_per_nonpad_token", "J/token"),
    Objective.COST: ("steady_nonpad_tokens_per_second", "$/Mtoken"),
}
# With --project_to: the same objectives from the run projected onto the other GPU (tunebench.projection).
PROJECTED = {
    Objective.TOKENS_PER_SECOND: "proj_steady_nonpad_tokens_per_second",
    Objective.JOULES_PER_TOKEN: "proj_joules_per_token",
    Objective.COST: "proj_steady_nonpad_tokens_per_second",
}
PEFT_CHOICES = ("none", "lora", "any")


@dataclass(frozen=True)
class TuneOptions:
    """What to tune for and the space to search; the `*_choices` narrow the space (None: tune's default)."""

    model: str
    num_gpus: int = 1
    effective_batch: int = 16
    max_seq_len: int = 1024
    peft: str = "any"
    objective: Objective = Objective.TOKENS_PER_SECOND
    gpu_hour_price: float | None = None
    budget_minutes: float | None = None
    results_output_path: str = "results-tune"
    device: Device = Device.AUTO
    plan_device: str | None = None
    lora_ranks: tuple[int, ...] = (16,)
    micro_batches: tuple[int, ...] | None = None
    gradient_checkpointing: tuple[bool, ...] = (False, True)
    packing: tuple[bool, ...] | None = None
    optimizers: tuple[str, ...] = ("adamw_torch_fused", "adamw_torch")
    torch_compile: tuple[bool, ...] | None = None
    training_data_path: str = "synthetic"
    synthetic_length_distribution: str = "fixed"
    tolerance_pct: float = 5.0
    confirm: int = 2
    margin_pct: float = 2.0
    timeout: float = 3600.0
    defaults_config_path: str | None = None
    framework_configs_path: str | None = None
    log_level: str = "INFO"
    grid: bool = False
    project_to: str | None = None  # rank for this GPU kind, from the runs here projected onto it
    # a user GPU table for --project_to and plan_device (hardware/gpus.yaml's form)
    gpu_table: str | None = None

    @property
    def objective_column(self) -> str:
        """The results column the objective is read from: the measured one, or its projection (--project_to)."""
        return PROJECTED[self.objective] if self.project_to else OBJECTIVES[self.objective][0]

    @property
    def minimise(self) -> bool:
        return self.objective != "tokens_per_second"


