"""ExperimentSpec: one experiment, resolved and typed once by the harness; its folder's spec.json is what the child
reads.

Built by the matrix (defaults < data_processing < scenario < framework config < CLI), validated there once
(tunebench.experiment.entry_parser), then consumed as it is by planning, preparation, the launchers and the
report. In the experiment folder, spec.json holds the identity, the resolved arguments (the CSV's argument
columns and the identity hash) and the typed values the training entry builds its objects from.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tunebench.experiment.arguments import ENTRY_GROUPS, group_value
from tunebench.experiment.data import dataset_fingerprint
from tunebench.fileio import safe_name, write_atomic

logger = logging.getLogger(__name__)

SPEC_FILE = "spec.json"
SPEC_VERSION = 1
BASELINE = "none"  # the framework_config name used for a `null` entry


@dataclass(frozen=True)
class FrameworkConfig:
    """A named overlay of acceleration settings applied on top of a scenario's arguments."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    description: str = ""
    min_gpus: int = 1  # e.g. FSDP needs 2 processes to mean anything
    accelerate_args: dict[str, Any] = field(default_factory=dict)  # extra `accelerate launch` options
    # the framework config whose rows this one's loss is judged against (None: the baseline, `none`); e.g. a fused
    # kernel over the quantized base it accelerates (tunebench.results.parity)
    parity_baseline: str | None = None
    source: str = ""  # the file that defined it (a problem of its arguments names it)


def _setting(group: str, key: str, doc: str) -> property:
    """A read-only property of ExperimentSpec: the typed value of `group`'s `key` (ExperimentSpec.value)."""
    return property(lambda spec: spec.value(group, key), doc=doc)


@dataclass(frozen=True)
class ExperimentSpec:
    """One fully resolved run: everything that decides its numbers is in here (and so in its identity)."""

    scenario: str
    framework_config: FrameworkConfig
    num_gpus: int
    device_type: Literal["cuda", "cpu"]  # on cpu, num_gpus counts processes
    arguments: dict[str, Any]  # resolved, as written: the identity and the CSV's argument columns
    effective_batch_size: int | None = None
    slow: bool = False
    exclusive: bool = False  # scheduling only (runs alone): not part of the identity
    timeout: float | None = None  # the scenario's own time limit in seconds (None: --timeout); not identity
    accelerate_config: dict[str, Any] = field(default_factory=dict)  # content of accelerate.yaml (N > 1)
    # {group: {key: typed value}} of the given keys, from the one parse (entry_parser.typed_values); empty until
    # the matrix is validated.
    entry: dict[str, dict[str, Any]] = field(default_factory=dict, compare=False)
    repeat: int = 1  # --repeats: which run of the same experiment (not part of the identity)

    @property
    def model_name_or_path(self) -> str:
        return self.arguments["model_name_or_path"]

    @functools.cached_property
    def experiment_id(self) -> str:
        """A stable hash of the resolved experiment: editing anything that changes the run changes the id."""
        payload = {
            "scenario": self.scenario,
            "framework_config": {"name": self.framework_config.name, "arguments": self.framework_config.arguments,
                                 "accelerate_args": self.framework_config.accelerate_args},
            "num_gpus": self.num_gpus,
            "device_type": self.device_type,
            "arguments": self.arguments,
            "accelerate_config": self.accelerate_config if self.num_gpus > 1 else {},
            # A local data file is identified by its size and mtime too: new data means a new experiment.
            "data": dataset_fingerprint(str(self.arguments.get("training_data_path", "synthetic"))),
        }
        blob = json.dumps(payload, sort_keys=True, default=str, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    @property
    def folder_name(self) -> str:
        """`<scenario>_<id>` (`-r<k>` after it for the k-th repeat): the scenario name made safe (no separators,
        no `..`, at most 64 characters); the id keeps two scenarios whose names sanitise alike apart."""
        suffix = f"-r{self.repeat}" if self.repeat > 1 else ""
        return f"{safe_name(self.scenario, fallback='scenario')}_{self.experiment_id}{suffix}"

    def value(self, group: str, key: str) -> Any:
        """A typed value: the given one, else the group's default (no object built: no device checks). The one
        way below the matrix to read a setting: `arguments` is the identity and the CSV's text, not an input."""
        if not self.entry:
            raise ValueError(f"{self.folder_name}: not validated yet (tunebench.matrix.validation types it)")
        return group_value(group, self.entry.get(group, {}), key)

    # The settings read most often, typed (the names the CSV and the docs use are their TrainingArguments ones).
    micro_batch = _setting("training", "per_device_train_batch_size",
                           "Samples per device per forward/backward (`per_device_train_batch_size`).")
    grad_accum = _setting("training", "gradient_accumulation_steps",
                          "Micro-batches per optimizer step (`gradient_accumulation_steps`).")
    max_seq_len = _setting("data", "max_seq_len", "Tokens per sequence (`max_seq_len`).")
    peft_method = _setting("peft", "peft_method", "`none`, `lora`, ... (`peft_method`).")

    def describe(self) -> dict[str, Any]:
        """Identity columns, as they appear in the CSVs."""
        return {
            "experiment_id": self.experiment_id,
            "scenario": self.scenario,
            "framework_config": self.framework_config.name,
            "model_name_or_path": self.model_name_or_path,
            "num_gpus": self.num_gpus,
            "device_type": self.device_type,
            "effective_batch_size": self.effective_batch_size,
            "per_device_train_batch_size": self.micro_batch,
            "gradient_accumulation_steps": self.grad_accum,
            "max_seq_len": self.max_seq_len,
            "packing": self.value("training", "packing"),
            "peft_method": self.peft_method,
            "torch_dtype": self.value("model", "torch_dtype"),
            "repeat": self.repeat,
        }

    def entry_for(self, folder: Path) -> dict[str, dict[str, Any]]:
        """The typed values the child builds its objects from, with this folder's outputs (no parsing needed:
        paths and flags are already their type)."""
        entry = {group: dict(self.entry.get(group, {})) for group in (*ENTRY_GROUPS, "training")}
        entry["bench"]["results_json"] = str(folder / "results.json")
        entry["training"]["output_dir"] = str(folder / "trainer_output")
        if self.device_type == "cpu":
            entry["training"]["use_cpu"] = True
        return entry

    def write(self, folder: Path, argv: list[str]) -> Path:
        """spec.json in the experiment folder: identity, arguments, framework config and the child's values."""
        payload = {
            "spec_version": SPEC_VERSION,
            **self.describe(),
            "framework_config_detail": dataclasses.asdict(self.framework_config),
            "slow": self.slow,
            "exclusive": self.exclusive,
            "timeout": self.timeout,
            "accelerate_config": self.accelerate_config,
            "arguments": self.arguments,
            "entry": self.entry_for(folder),
            "argv": argv,
        }
        path = folder / SPEC_FILE
        write_atomic(path, json.dumps(payload, indent=2, sort_keys=True, default=str))
        return path


def read_entry(path: str | Path) -> dict[str, dict[str, Any]]:
    """The child's typed values from a spec.json; ValueError naming the file when it is not one."""
    from tunebench.readback import load_json

    try:
        data = load_json(path)
    except (OSError, ValueError) as exc:  # readback.Unreadable is a ValueError naming the file and the reason
        raise ValueError(f"{path}: not a readable spec.json ({getattr(exc, 'reason', exc)})") from None
    if not isinstance(data, dict) or data.get("spec_version") != SPEC_VERSION \
            or not isinstance(data.get("entry"), dict) \
            or not all(isinstance(group, dict) for group in data["entry"].values()):
        raise ValueError(f"{path}: not a spec.json of this tunebench (spec_version {SPEC_VERSION})")
    return data["entry"]
