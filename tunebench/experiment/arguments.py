"""The training entry's own arguments: typed dataclasses with their choices (Literal) and ranges, one per group.

Each field's metadata carries its `help`; numbers have a range (tunebench.experiment.ranges.ENTRY_RANGES; argparse
takes every metadata key as an option, so ranges live beside the fields). The harness checks every experiment
against them before anything runs, and the argument reference page (docs/reference/arguments.md) is made from them
(`python -m tunebench.cli.reference_tables`), so the two cannot drift apart.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from tunebench.vocabulary import PeftMethod

logger = logging.getLogger(__name__)

INT8_THRESHOLD = 6.0  # LLM.int8's default outlier threshold (BitsAndBytesConfig's llm_int8_threshold)
MEMORY_LOGGING_CHOICES = ("scanner", "huggingface", "nvidia", "all", "none")


@dataclass
class ModelArguments:
    model_name_or_path: str = field(
        default="preset:llama-tiny",
        metadata={"help": "`preset:<name>`, a local dir with `config.json` (weights optional: random when absent), "
                  "or a hub id `org/name` (needs a network)"})
    torch_dtype: Literal["auto", "float32", "bfloat16", "float16"] = field(
        default="float32", metadata={"help": "dtype the weights are created in (`bfloat16` in `defaults.yaml`)"})
    attn_implementation: str | None = field(
        default=None, metadata={"help": "`eager`, `sdpa`, `flash_attention_2`, … (default: the model's own)"})
    preset_init_device: Literal["auto", "cpu"] = field(
        default="auto",
        metadata={"help": "where presets are randomly initialised: `auto` = this rank's GPU when training on CUDA "
                  "(unless FSDP offloads to the host), else the host; `cpu` forces the host"})
    # A quantized base (bitsandbytes), named as transformers' BitsAndBytesConfig names it: users pass the same
    # keys to from_pretrained. Presets and config-only folders are quantized through that same loader
    # (tunebench.experiment.quantization writes their random weights as a checkpoint first).
    load_in_4bit: bool = field(
        default=False, metadata={"help": "quantize the base to 4 bits with bitsandbytes (QLoRA); needs "
                                 "`peft_method: lora` and `tunebench[quant]`"})
    load_in_8bit: bool = field(
        default=False, metadata={"help": "quantize the base to 8 bits with bitsandbytes (LLM.int8); needs "
                                 "`peft_method: lora` and `tunebench[quant]`"})
    llm_int8_threshold: float = field(
        default=INT8_THRESHOLD, metadata={"help": "8-bit: input columns holding a value of at least this magnitude are "
                               "multiplied (and kept for backward) in 16 bits; 0 turns the outlier split off"})
    bnb_4bit_quant_type: Literal["nf4", "fp4"] = field(
        default="nf4", metadata={"help": "4-bit data type: `nf4` (normal float, QLoRA's) or `fp4`"})
    bnb_4bit_use_double_quant: bool = field(
        default=False, metadata={"help": "quantize the 4-bit blocks' scales too (QLoRA's double quantization)"})
    bnb_4bit_compute_dtype: Literal["bfloat16", "float16", "float32"] = field(
        default="bfloat16", metadata={"help": "dtype the 4-bit weights are dequantized to for each matmul"})
    bnb_4bit_quant_storage: Literal["auto", "uint8", "bfloat16", "float16", "float32"] = field(
        default="auto", metadata={"help": "dtype the packed 4-bit weights are stored in: `uint8` (bitsandbytes' "
                                  "default) or a float dtype, which FSDP can shard (FSDP-QLoRA); `auto` = the "
                                  "weights' dtype under FSDP, `uint8` otherwise"})
    # fms-acceleration's plugins (the `plugins:` body of one of its sample configurations): the experiment runs
    # through fms's AccelerationFramework (tunebench.experiment.fms), in a fresh process.
    fms_plugins: str = field(
        default="", metadata={"help": "fms-acceleration plugin configuration: the `plugins:` mapping of an fms sample "
                              "configuration (GPTQ or bitsandbytes bases, foak's fused kernels); the framework "
                              "configs of fms's names carry them (docs/from-fms.md)"})


@dataclass
class DataArguments:
    training_data_path: str = field(
        default="synthetic",
        metadata={"help": "`synthetic`, a local `.json`/`.jsonl`/`.parquet` (`text` or `messages` rows), or a hub "
                  "dataset `org/name`; a path with a folder or a data-file suffix must exist here"})
    max_seq_len: int = field(
        default=1024, metadata={"help": "maximum tokens per sequence; sets `SFTConfig.max_length`"})
    synthetic_num_samples: int = field(
        default=512, metadata={"help": "rows of synthetic data"})
    synthetic_length_distribution: Literal["uniform", "fixed", "lognormal"] = field(
        default="uniform",
        metadata={"help": "`fixed` (all rows max_seq_len: no padding), `uniform` in [min, max], `lognormal` "
                  "(`fixed` in `defaults.yaml`)"})
    synthetic_min_len: int = field(
        default=0, metadata={"help": "shortest synthetic row (0 = max_seq_len/4)"})
    synthetic_corpus: Literal["markov", "uniform"] = field(
        default="markov",
        metadata={"help": "`markov`: walks on a sparse random Markov chain (a loss floor of ln k nats a token: "
                  "learnable, so loss parity and time to target can see); `uniform`: ids uniform at random (floor "
                  "ln of the ids used; for pure throughput rows). Same lengths, same shapes"})
    synthetic_markov_states: int = field(
        default=32, metadata={"help": "`markov`: the chain's states, each one token id (at most the tokenizer's "
                              "ordinary ids)"})
    synthetic_markov_branching: int = field(
        default=2, metadata={"help": "`markov`: successors of every state, each with probability 1/k (floor ln k)"})


@dataclass
class PeftArguments:
    peft_method: PeftMethod = field(
        default="none", metadata={"help": "parameter-efficient fine-tuning method"})
    r: int = field(default=8, metadata={"help": "LoRA rank"})
    lora_alpha: int = field(default=16, metadata={"help": "LoRA scaling numerator (scale = lora_alpha / r)"})
    lora_dropout: float = field(default=0.0, metadata={"help": "LoRA dropout"})
    target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "v_proj"], metadata={"help": "LoRA target module names"})
    num_virtual_tokens: int = field(default=20, metadata={"help": "prompt-tuning virtual tokens"})


@dataclass
class BenchArguments:
    results_json: str = field(default="", metadata={"help": "where the entry writes its row (set by the harness)"})
    memory_logging: str = field(
        default="scanner",
        metadata={"help": "comma list of `scanner`, `huggingface`, `nvidia`, `all`, `none` (set by the harness "
                  "from `--memory_logging` / `MEMORY_LOGGING`)"})
    scan_steps: str = field(
        default="auto",
        metadata={"help": "step(s) the scanner measures memory on: `auto` = the last warm-up step but one (step "
                  "4), `4` or `4-6`"})
    scan_time_steps: str = field(
        default="auto",
        metadata={"help": "steps whose phases the scanner times with light hooks: `auto` = every steady step, "
                  "`6-14`, or `off` (phases from the memory-scanned step)"})
    steady_warmup_steps: int = field(
        default=5, metadata={"help": "optimizer steps left out of the steady-state statistics"})
    steady_state: Literal["fixed", "auto"] = field(
        default="fixed",
        metadata={"help": "`fixed`: run `max_steps`; `auto`: stop once the median step time is known to "
                  "±`steady_target_ci_pct` at 95 % confidence (`max_steps` bounds it)"})
    steady_min_steps: int = field(
        default=10, metadata={"help": "fewer steady steps give a `measurement_warning`"})
    steady_max_cv: float = field(
        default=0.05, metadata={"help": "a robust step-time spread above this gives a `measurement_warning`"})
    steady_target_ci_pct: float = field(
        default=1.0, metadata={"help": "`steady_state: auto`: target 95 % half-width of the median, in %"})
    loss_target_fraction: float = field(
        default=0.2, metadata={"help": "time to target: the target loss is this fraction of the way from the first "
                                "step's loss to the data's entropy floor (`loss_target_*` columns)"})
    loss_target_nats: float = field(
        default=0.0, metadata={"help": "time to target: this loss instead (nats a token; 0 = from "
                               "`loss_target_fraction`); gives your own data, whose floor is unknown, a target"})
    loss_band_seed: int = field(
        default=0, metadata={"help": "0: a micro-batch's rows in the sampler's order; k > 0: permuted by a generator "
                             "seeded with k — the same data and numerics, the arithmetic reordered (a loss-band "
                             "run: framework configs `loss-band-<k>`, docs/explanations/accelerations.md, "
                             "\"Loss parity\")"})
    loss_band_kind: Literal["rows", "last_bit"] = field(
        default="rows", metadata={"help": "what a band run (loss_band_seed > 0) perturbs: `rows`, the order of a "
                                  "micro-batch's rows only; `last_bit`, also every linear layer's output by one unit "
                                  "in the last place on a random half of its elements (the rounding of kernels that "
                                  "compute the same math differently: framework configs `loss-band-bits-<k>`)"})
    sft_loss: Literal["model", "trl"] = field(
        default="model",
        metadata={"help": "`model`: the model's own loss, as `transformers.Trainer` computes it (no per-step host "
                  "sync); `trl`: TRL's fused LM head with its entropy / token-accuracy metrics"})


# The entry's argument groups, in the order the entry receives them (the SFTConfig group, "training", is last).
ENTRY_GROUPS = {"model": ModelArguments, "data": DataArguments, "peft": PeftArguments, "bench": BenchArguments}


def group_value(group: str, values: Mapping[str, Any] | Any, key: str) -> Any:
    """One typed setting of an entry group: the value given in `values` (the group's typed values, as a spec's
    `entry` holds them, or the group's arguments object), else the group's default."""
    given = values if isinstance(values, Mapping) else vars(values)
    if key in given:
        return given[key]
    if group not in ENTRY_GROUPS:
        return copy.deepcopy(training_fields().defaults[key])
    default = next(f for f in dataclasses.fields(ENTRY_GROUPS[group]) if f.name == key)
    return default.default_factory() if default.default_factory is not dataclasses.MISSING else default.default


def parse_memory_logging(value: str) -> set[str]:
    """`scanner,nvidia` → {"scanner", "nvidia"}; `all` means every mode; ValueError names unknown modes."""
    modes = {m.strip() for m in str(value).split(",") if m.strip()}
    unknown = modes - set(MEMORY_LOGGING_CHOICES)
    if unknown:
        raise ValueError(f"memory_logging: unknown mode(s) {sorted(unknown)}; use {list(MEMORY_LOGGING_CHOICES)}")
    if "all" in modes:
        return {"scanner", "huggingface", "nvidia"}
    return modes - {"none"}


@dataclass(frozen=True)
class TrainingFields:
    """What the harness reads of the training group's class once the experiments are typed: each field's default,
    the fields that take a mapping and the keys of one of them (accelerator_config, checked again in the rows on
    disk as the CSVs are rebuilt). Made where TRL is imported; a run's harness gets it from the preload server's
    fork that typed the matrix (tunebench.matrix.validation), and so never imports TRL or transformers itself."""

    defaults: dict[str, Any]
    mapping_fields: tuple[str, ...]
    accelerator_keys: dict[str, bool]  # AcceleratorConfig's fields, each with whether it is a switch (true/false)


_handed_over: TrainingFields | None = None


def training_fields() -> TrainingFields:
    """The training group's fields: those handed over by a process that imported TRL, else read from the class."""
    return _handed_over if _handed_over is not None else _fields_of_the_class()


def hand_over(fields: TrainingFields | None) -> None:
    """Take the training group's fields from a process of the same installation that imported TRL (None: read them
    from the class again)."""
    global _handed_over
    _handed_over = fields


@functools.lru_cache(maxsize=1)
def _fields_of_the_class() -> TrainingFields:
    kind = training_class()
    defaults = {f.name: f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
                for f in dataclasses.fields(kind)
                if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING}
    from transformers.trainer_pt_utils import AcceleratorConfig

    switches = {f.name: str(f.type) in ("bool", "<class 'bool'>") for f in dataclasses.fields(AcceleratorConfig)}
    return TrainingFields(defaults, tuple(getattr(kind, "_VALID_DICT_FIELDS", ())), switches)


@functools.lru_cache(maxsize=1)
def training_class():
    """The training group's argument class: TRL's SFTConfig (TrainingArguments and TRL's own fields), imported on
    first use (TRL imports transformers' trainer stack)."""
    from trl import SFTConfig

    return SFTConfig
