"""benchmark.py's options: one argparse parser whose help texts, types and ranges are the README's option table.

`python -m tunebench.cli.readme_tables` writes that table (and the training arguments') into the README; a test
fails when they differ, so the README, `--help` and the checks cannot drift apart.
"""

from __future__ import annotations

import argparse
import logging
import os

from transformers.hf_argparser import string_to_bool

from tunebench.api.checks import cli_ranges
from tunebench.api.matrix import CPU_SCENARIOS, INPUTS_ROOT, MatrixOptions
from tunebench.api.projecting import PARALLELISMS, ProjectionOptions
from tunebench.api.running import RunSettings
from tunebench.bounds import COUNT, Range
from tunebench.cli.parsing import Parser
from tunebench.cli.plugin_options import add_plugin_options, plugin_ranges
from tunebench.errors import InputProblem
from tunebench.execution.executors import EXECUTORS
from tunebench.execution.launchers import LAUNCHERS
from tunebench.telemetry.trackers import ALWAYS, TRACKERS
from tunebench.vocabulary import Device, Executor

logger = logging.getLogger(__name__)

# Ranges of numeric options, checked at the edge (exit 2, naming the option and its range). Every int/float
# option has one (tests/tunebench/cli/test_parsing_hostile.py): NaN and infinities are outside every range.
# The matrix's and the run's ranges are their fields' (tunebench.api.checks): the Python API checks the same
# (the matrices' values arrive as text: `numbers` below checks each against the same COUNT range).
CORE_RANGES: dict[str, Range] = {
    **{option: allowed for option, allowed in cli_ranges(MatrixOptions).items() if not option.endswith("_matrix")},
    **cli_ranges(RunSettings), **cli_ranges(ProjectionOptions),
}
# fms-acceleration's own options that tunebench accepts (and says what it does instead): a port is a port.
CORE_RANGES["--process_port"] = Range(1, 65535)
# The plugins' options carry their own ranges (executors, trackers: tunebench.cli.plugin_options).
OPTION_RANGES: dict[str, Range] = {**CORE_RANGES, **plugin_ranges()}
# The matrices arrive as text (`"1 2"`, `1,2`) and are read by `numbers` / `booleans` below.
MATRIX_TYPES = {"--num_gpus_matrix": "int list", "--effective_batch_size_matrix": "int list",
                "--max_seq_len_matrix": "int list", "--packing_matrix": "bool list",
                "--attn_implementation_matrix": "text list"}
MATRIX_RANGE = COUNT  # what `numbers` accepts
SUBCOMMAND_HELP = ("subcommands: `plan` (predict memory per experiment, run nothing), `verify` (the scanner "
                   "against torch's MemTracker on this machine), `compare` (regression check against a reference "
                   "CSV), `report` (HTML report), `tune` (the fastest configuration that fits, by a pruned search); "
                   "e.g. `benchmark.py compare --help`")


def split(values: list[str]) -> list[str]:
    """Matrices accept `--opt 1 2`, `--opt "1 2"` and `--opt 1,2` (the shell script passes one string)."""
    return [v for value in values for v in value.replace(",", " ").split()]


def numbers(values: list[str] | None, option: str, problems: list[InputProblem]) -> list[int] | None:
    if values is None:
        return None
    items = split(values)
    try:
        found = [int(v) for v in items]
    except ValueError:
        problems.append(InputProblem("command line", option, f"expected whole numbers, got {' '.join(items)!r}",
                                     f"e.g. {option} 1 2"))
        return None
    if not found or any(MATRIX_RANGE.problem(n) for n in found):
        problems.append(InputProblem("command line", option, f"expected numbers {MATRIX_RANGE.describe()}, got "
                                     f"{' '.join(items)[:80]}", f"e.g. {option} 1 2"))
        return None
    return found


def booleans(values: list[str] | None, problems: list[InputProblem]) -> list[bool] | None:
    if values is None:
        return None
    items = split(values)
    try:
        return [string_to_bool(v) for v in items]
    except Exception:  # string_to_bool raises ArgumentTypeError with the accepted spellings
        problems.append(InputProblem("command line", "--packing_matrix", f"expected true/false values, got {items}",
                                     "e.g. --packing_matrix true false"))
        return None


PLAN_DESCRIPTION = ("Predict each experiment's memory (the matrix benchmark.py would run), print the table and "
                    "write <results>/plan.csv; nothing runs. Takes benchmark.py's options.")


def build_parser(prog: str = "benchmark.py") -> argparse.ArgumentParser:
    """benchmark.py's parser; `benchmark.py plan` has the same options under its own name and description."""
    description = PLAN_DESCRIPTION if prog.endswith(" plan") else \
        "Run a fine-tuning benchmark matrix. " + SUBCOMMAND_HELP + "."
    parser = Parser(prog=prog, description=description)

    def opt(*names, **kw):  # every option also answers to its dash spelling
        parser.add_argument(*names, *[n.replace("_", "-") for n in names if "_" in n], **kw)

    for options in (_matrix_options, _input_options, _run_options, _telemetry_options):
        options(opt)
    add_plugin_options(parser)
    return parser


def _matrix_options(opt) -> None:
    opt("--num_gpus_matrix", nargs="+", metavar="N",
        help="GPU counts; on CPU, process counts (gloo). Default 1")
    opt("--effective_batch_size_matrix", nargs="+", metavar="B",
        help="effective batch = per-device batch × grad accumulation × GPUs. An explicit "
        "`per_device_train_batch_size` derives grad accumulation; else an explicit `gradient_accumulation_steps` "
        "derives the per-device batch; else grad accumulation is 1. Indivisible → exit 2")
    opt("--max_seq_len_matrix", nargs="+", metavar="L", help="sequence lengths")
    opt("--packing_matrix", nargs="+", metavar="BOOL", help="packing on/off, e.g. true false")
    opt("--attn_implementation_matrix", nargs="+", metavar="IMPL",
        help="attention implementations, e.g. sdpa eager flex_attention (flash_attention_2/_3 need flash-attn); "
             "each row records the kernel SDPA actually ran (`scan_attention_backend`)")
    opt("--run_only_scenarios", nargs="+", metavar="NAME", help="run only these scenarios (default: all but "
        "`slow: true` ones)")
    opt("--include_slow", action="store_true", help="also run `slow: true` scenarios")


def _input_options(opt) -> None:
    opt("--scenarios_config_path", metavar="YAML",
        help=f"scenarios (default `scenarios.yaml`; `{CPU_SCENARIOS}` when no GPU is present)")
    opt("--defaults_config_path", metavar="YAML", default=str(INPUTS_ROOT / "defaults.yaml"),
        help="arguments of every experiment (`defaults.yaml`)")
    opt("--framework_configs_path", metavar="YAML", default=str(INPUTS_ROOT / "framework_configs.yaml"),
        help="framework configs (`framework_configs.yaml`)")
    opt("--accelerate_config", metavar="YAML", default=str(INPUTS_ROOT / "accelerate.yaml"),
        help="accelerate config of multi-process runs (`accelerate.yaml`); must exist")
    opt("--results_output_path", metavar="DIR", default="results",
        help="output folder: new, empty, or one tunebench wrote; anything else is exit 2 (README \"What tunebench "
        "does with your files\"). One harness per folder: a second one is refused (exit 2, naming the holder)")
    opt("--device", choices=Device.values(), default=Device.AUTO.value,
        help="`auto` = cuda when nvidia-smi lists GPUs")
    opt("--acceleration_framework_config_keypairs", nargs="+", metavar="NAME FILE",
        help="fms-acceleration sample configuration files under the names scenarios use (`NAME FILE ...`): each "
        "runs its `plugins:` through fms (docs/from-fms.md); fms's own names are framework configs already")
    opt("--dataset_save_path", metavar="DIR", help="fms-acceleration's data cache option: tunebench caches "
        "preprocessed data itself, in $TUNEBENCH_CACHE/data (one line says so; nothing else changes)")
    opt("--process_port", type=int, metavar="PORT", help="fms-acceleration's accelerate port option: tunebench gives "
        "every multi-process experiment a free port of its own (one line says so; nothing else changes)")


def _run_options(opt) -> None:
    opt("--overwrite", action="store_true", help="first remove the experiment folders and CSVs of earlier runs in "
        "the results folder (only what tunebench wrote there); without it, finished experiments are reused")
    opt("--dry_run", action="store_true", help="print the matrix, write each experiment's spec.json and command.sh, "
        "run nothing (no GPU needed); never rewrites the files of an experiment that already ran")
    opt("--plan", action="store_true", help="predict each experiment's memory before launching it (`pred_*` "
        "columns); `benchmark.py plan` predicts only, prints the table and writes `<out>/plan.csv`")
    opt("--plan_device", metavar="GPU|SIZE", default=None, help="GPU to plan for: a name of the GPU table (\"NVIDIA "
        "H100 80GB HBM3\"; a name plans for CUDA, and contradicts --device cpu) or a size (`80GiB`); default the "
        "GPUs present. A size on a CPU matrix is a per-process budget. One device (several, comma-separated, only "
        "with --project_from; an empty entry or a device listed twice is exit 2)")
    opt("--fit_map", action="store_true", help="with `benchmark.py plan`: instead of the matrix's rows, the largest "
        "micro-batch predicted to fit the GPU (--plan_device or the one here) per model × framework config × PEFT "
        "× sequence length, in `<out>/fit_map.csv`")
    opt("--project_from", metavar="RESULTS", help="with `benchmark.py plan`: every measured experiment of a results "
        "folder projected onto --plan_device (steady tokens/s, phases, cost, energy, memory verdict) in "
        "`<out>/projection.csv`; several GPU kinds: `--plan_device \"NVIDIA H200, NVIDIA L40S\"` (README "
        "\"Projection\")")
    opt("--gpu_table", metavar="YAML", help="GPUs added to, or figures overriding, the GPU table that --plan_device "
        "names resolve in (`tunebench/hardware/gpus.yaml`: memory, compute capability, rates)")
    opt("--gpu_hour_usd", type=float, metavar="USD", help="the target's price per GPU hour, for "
        "`proj_usd_per_million_tokens` (no prices are shipped; several targets: `usd_per_hour` in --gpu_table)")
    opt("--project_num_gpus", type=int, default=None, metavar="N",
        help="GPUs of --plan_device to project to (default: each row's own count)")
    opt("--project_parallelism", choices=list(PARALLELISMS), default=None,
        help="how --project_num_gpus GPUs share a one-GPU row's work: DDP replicas or FSDP2 shards (a row measured "
             "on several GPUs keeps its own)")
    opt("--skip_predicted_oom", action="store_true", help="experiments predicted not to fit are `skipped` with the "
        "predicted peak and the capacity (implies `--plan`)")
    opt("--executor", choices=EXECUTORS.names(), default=Executor.LOCAL.value,
        help="where experiments run: this machine, one Ray task each on a Ray cluster (`tunebench[ray]`), or one "
        "Slurm job each (`tunebench[slurm]`); an experiment wider than a node spans several. Each executor's own "
        "options are in its group below")
    opt("--launcher", choices=LAUNCHERS.names(), default=None,
        help="start experiments with this launcher where it fits them (a multi-process one for several processes, "
        "another for one); default: forkserver (python with --no_preload) for one process, torchrun on CPU and "
        "accelerate on GPUs for several")
    opt("--cpu_slots", type=int, default=0, metavar="N", help="CPU runs: process slots to pack onto (0: the cores)")
    opt("--exclusive_timing", action="store_true",
        help="every experiment alone on the machine (a scenario can ask with `exclusive: true`)")
    opt("--no_preload", action="store_true",
        help="start every experiment in a new interpreter instead of forking it from the preload server")
    opt("--preload_models", action="store_true", help="load every model's config and tokenizer before the matrix")
    opt("--no_data_processing", action="store_true", help="reuse the preprocessed-data cache; a missing entry is "
        "exit 2")
    opt("--timeout", type=float, default=3600.0, metavar="S", help="per-experiment timeout in seconds")
    opt("--no_resume", action="store_true", help="re-run experiments that already completed")
    opt("--repeats", type=int, default=1, metavar="N",
        help="run every experiment N times, interleaved (all experiments once, then again), each run a row and a "
        "folder (`-r<k>`); rows get the olympic mean and spread over the runs, and compare uses the runs as samples")
    opt("--compare_with", metavar="CSV", help="after the run, compare with a reference (exit 1 on regression)")
    opt("--compare_threshold", nargs="+", metavar="METRIC=PCT",
        help="thresholds for `--compare_with`, as `benchmark.py compare --threshold`")
    opt("--log_level", default="INFO", help="logging level of the harness")


def _telemetry_options(opt) -> None:
    opt("--trackers", nargs="+", choices=TRACKERS.names(), default=None, metavar="NAME",
        help=f"harness trackers to add ({' and '.join(ALWAYS)} always on): {', '.join(TRACKERS.names())}")
    opt("--log_nvidia_smi", action="store_true", help="nvidia-smi sidecar per experiment (= `--memory_logging` "
        "with `nvidia`): a separate poller restricted to the experiment's GPUs, baseline subtracted, always reaped")
    opt("--log_memory_hf", action="store_true", help="HF `skip_memory_metrics=False` columns (costs ~4%% throughput)")
    opt("--memory_logging", default=os.environ.get("MEMORY_LOGGING", "scanner"), metavar="MODES",
        help="comma list of `scanner`, `huggingface`, `nvidia`, `all`, `none` (env `MEMORY_LOGGING`)")
