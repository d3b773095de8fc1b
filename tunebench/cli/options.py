"""benchmark.py's options: one argparse parser whose help texts, types and ranges are the docs' option table.

`python -m tunebench.cli.reference_tables` writes that table (and the training arguments') into docs/reference/; a test
fails when they differ, so the docs, `--help` and the checks cannot drift apart.
"""

from __future__ import annotations

import logging
import os

from tunebench.api.checks import cli_ranges
from tunebench.api.matrix import CPU_SCENARIOS, INPUTS_ROOT, MatrixOptions
from tunebench.api.projecting import PARALLELISMS, ProjectionOptions
from tunebench.api.running import RunSettings
from tunebench.bounds import COUNT, Range
from tunebench.cli.parsing import Parser, spellings, text_to_bool
from tunebench.cli.plugin_options import add_plugin_options, plugin_ranges, refuse_plugin_options
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
                   "CSV), `report` (HTML report), `tune` (the fastest configuration that fits, by a pruned search), "
                   "`history` (results over time: add, check, report, export), `bisect` (the first ref or version "
                   "that made an experiment slower); each has its own --help, e.g. `benchmark.py compare --help`")


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
        return [text_to_bool(v) for v in items]
    except Exception:  # text_to_bool raises ArgumentTypeError with the accepted spellings
        problems.append(InputProblem("command line", "--packing_matrix", f"expected true/false values, got {items}",
                                     "e.g. --packing_matrix true false"))
        return None


RUN, PLAN = "benchmark.py", "benchmark.py plan"
PLAN_DESCRIPTION = ("Predict each experiment's memory (the matrix benchmark.py would run), print the table and "
                    "write <results>/plan.csv; nothing runs (--fit_map: the largest micro-batch that fits; "
                    "--project_from: measured runs projected onto other GPUs).")
# The option groups of `--help`, in this order; what each command takes is said beside each option below.
GROUPS = {"matrix": "the matrix: what runs", "inputs": "input files", "output": "results and logging",
          "planning": "planning and projection", "running": "running the matrix", "telemetry": "telemetry"}


class _Options:
    """Declares benchmark.py's options on one command's parser: an option another command takes is not added but
    remembered (refused by name, its default kept so the code below reads one namespace shape)."""

    def __init__(self, parser: Parser, command: str):
        self.parser, self.command = parser, command
        self.groups = {key: parser.add_argument_group(title) for key, title in GROUPS.items()}

    def __call__(self, *names, group: str, only: str | None = None, **kw) -> None:
        spelled = spellings(*names)
        if only is None or only == self.command:
            self.groups[group].add_argument(*spelled, **kw)
            return
        default = kw.get("default", False if kw.get("action") == "store_true" else None)
        self.parser.set_defaults(**{names[0].lstrip("-"): default})
        self.parser.elsewhere.update(dict.fromkeys(spelled, only))


def build_parser(prog: str = RUN) -> Parser:
    """benchmark.py's parser, or `benchmark.py plan`'s: each lists, and takes, only the options it uses."""
    command = PLAN if prog.endswith(" plan") else RUN
    description = PLAN_DESCRIPTION if command == PLAN else \
        "Run a fine-tuning benchmark matrix. " + SUBCOMMAND_HELP + "."
    parser = Parser(prog=prog, description=description)
    opt = _Options(parser, command)
    for options in (_matrix_options, _input_options, _planning_options, _run_options, _telemetry_options):
        options(opt)
    if command == RUN:
        add_plugin_options(parser)
    else:  # the executors' and trackers' options are the run's
        refuse_plugin_options(parser, RUN)
    return parser


def _matrix_options(opt) -> None:
    opt("--num_gpus_matrix", group="matrix", nargs="+", metavar="N",
        help="GPU counts; on CPU, process counts (gloo). Default 1")
    opt("--effective_batch_size_matrix", group="matrix", nargs="+", metavar="B",
        help="effective batch = per-device batch × grad accumulation × GPUs. An explicit "
        "`per_device_train_batch_size` derives grad accumulation; else an explicit `gradient_accumulation_steps` "
        "derives the per-device batch; else grad accumulation is 1. Indivisible → exit 2")
    opt("--max_seq_len_matrix", group="matrix", nargs="+", metavar="L", help="sequence lengths")
    opt("--packing_matrix", group="matrix", nargs="+", metavar="BOOL", help="packing on/off, e.g. true false")
    opt("--attn_implementation_matrix", group="matrix", nargs="+", metavar="IMPL",
        help="attention implementations, e.g. sdpa eager flex_attention (flash_attention_2/_3 need flash-attn); "
             "each row records the kernel SDPA actually ran (`scan_attention_backend`)")
    opt("--run_only_scenarios", group="matrix", nargs="+", metavar="NAME",
        help="run only these scenarios (default: all but "
        "`slow: true` ones)")
    opt("--include_slow", group="matrix", action="store_true", help="also run `slow: true` scenarios")


def _input_options(opt) -> None:
    opt("--scenarios_config_path", group="inputs", metavar="YAML",
        help=f"scenarios (default `scenarios.yaml`; `{CPU_SCENARIOS}` when no GPU is present)")
    opt("--defaults_config_path", group="inputs", metavar="YAML", default=str(INPUTS_ROOT / "defaults.yaml"),
        help="arguments of every experiment (`defaults.yaml`)")
    opt("--framework_configs_path", group="inputs", metavar="YAML",
        default=str(INPUTS_ROOT / "framework_configs.yaml"),
        help="framework configs (`framework_configs.yaml`)")
    opt("--accelerate_config", group="inputs", metavar="YAML", default=str(INPUTS_ROOT / "accelerate.yaml"),
        help="accelerate config of multi-process runs (`accelerate.yaml`); must exist")
    opt("--results_output_path", group="output", metavar="DIR", default="results",
        help="output folder: new, empty, or one tunebench wrote; anything else is exit 2 (docs/guides/running.md, "
        "\"What tunebench does with your files\"). One harness per folder: a second one is refused (exit 2, naming "
        "the holder)")
    opt("--device", group="inputs", choices=Device.values(), default=Device.AUTO.value,
        help="`auto` = cuda when nvidia-smi lists GPUs")
    opt("--acceleration_framework_config_keypairs", group="inputs", nargs="+", metavar="NAME FILE",
        help="fms-acceleration sample configuration files under the names scenarios use (`NAME FILE ...`): each "
        "runs its `plugins:` through fms (docs/from-fms.md); fms's own names are framework configs already")
    opt("--dataset_save_path", group="inputs", only=RUN, metavar="DIR",
        help="fms-acceleration's data cache option: tunebench caches "
        "preprocessed data itself, in $TUNEBENCH_CACHE/data (one line says so; nothing else changes)")
    opt("--process_port", group="inputs", only=RUN, type=int, metavar="PORT",
        help="fms-acceleration's accelerate port option: tunebench gives "
        "every multi-process experiment a free port of its own (one line says so; nothing else changes)")


def _run_options(opt) -> None:
    opt("--overwrite", group="output", only=RUN, action="store_true",
        help="first remove the experiment folders and CSVs of earlier runs in "
        "the results folder (only what tunebench wrote there); without it, finished experiments are reused")
    opt("--dry_run", group="running", only=RUN, action="store_true",
        help="print the matrix, write each experiment's spec.json and command.sh, "
        "run nothing (no GPU needed); never rewrites the files of an experiment that already ran")
    opt("--executor", group="running", only=RUN, choices=EXECUTORS.names(), default=Executor.LOCAL.value,
        help="where experiments run: this machine, one Ray task each on a Ray cluster (`tunebench[ray]`), or one "
        "Slurm job each (`tunebench[slurm]`); an experiment wider than a node spans several. Each executor's own "
        "options are in its group below")
    opt("--launcher", group="running", only=RUN, choices=LAUNCHERS.names(), default=None,
        help="start experiments with this launcher where it fits them (a multi-process one for several processes, "
        "another for one); default: forkserver (python with --no_preload) for one process, torchrun on CPU and "
        "accelerate on GPUs for several")
    opt("--cpu_slots", group="running", only=RUN, type=int, default=0, metavar="N",
        help="CPU runs: process slots to pack onto (0: the cores)")
    opt("--exclusive_timing", group="running", only=RUN, action="store_true",
        help="every experiment alone on the machine (a scenario can ask with `exclusive: true`)")
    opt("--no_preload", group="running", only=RUN, action="store_true",
        help="start every experiment in a new interpreter instead of forking it from the preload server")
    opt("--preload_models", group="running", action="store_true",
        help="load every model's config and tokenizer before the matrix")
    opt("--no_data_processing", group="running", only=RUN, action="store_true",
        help="reuse the preprocessed-data cache; a missing entry is "
        "exit 2")
    opt("--timeout", group="running", only=RUN, type=float, default=3600.0, metavar="S",
        help="per-experiment timeout in seconds")
    opt("--no_resume", group="running", only=RUN, action="store_true", help="re-run experiments that already completed")
    opt("--repeats", group="running", only=RUN, type=int, default=1, metavar="N",
        help="run every experiment N times, interleaved (all experiments once, then again), each run a row and a "
        "folder (`-r<k>`); rows get the olympic mean and spread over the runs, and compare uses the runs as samples")
    opt("--compare_with", group="running", only=RUN, metavar="CSV",
        help="after the run, compare with a reference (exit 1 on regression)")
    opt("--compare_threshold", group="running", only=RUN, nargs="+", metavar="METRIC=PCT",
        help="thresholds for `--compare_with`, as `benchmark.py compare --threshold`")
    opt("--log_level", group="output", default="INFO", help="logging level of the harness")


def _planning_options(opt) -> None:
    opt("--plan", group="planning", only=RUN, action="store_true",
        help="predict each experiment's memory before launching it (`pred_*` "
        "columns); `benchmark.py plan` predicts only, prints the table and writes `<out>/plan.csv`")
    opt("--plan_device", group="planning", metavar="GPU|SIZE", default=None,
        help="GPU to plan for: a name of the GPU table (\"NVIDIA "
        "H100 80GB HBM3\"; a name plans for CUDA, and contradicts --device cpu) or a size (`80GiB`); default the "
        "GPUs present. A size on a CPU matrix is a per-process budget. One device (several, comma-separated, only "
        "with --project_from; an empty entry or a device listed twice is exit 2)")
    opt("--fit_map", group="planning", only=PLAN, action="store_true",
        help="with `benchmark.py plan`: instead of the matrix's rows, the largest "
        "micro-batch predicted to fit the GPU (--plan_device or the one here) per model × framework config × PEFT "
        "× sequence length, in `<out>/fit_map.csv`")
    opt("--project_from", group="planning", only=PLAN, metavar="RESULTS",
        help="with `benchmark.py plan`: every measured experiment of a results "
        "folder projected onto --plan_device (steady tokens/s, phases, cost, energy, memory verdict) in "
        "`<out>/projection.csv`; several GPU kinds: `--plan_device \"NVIDIA H200, NVIDIA L40S\"` (docs/guides/plan.md, "
        "\"Projection\")")
    opt("--gpu_table", group="planning", metavar="YAML",
        help="GPUs added to, or figures overriding, the GPU table that --plan_device "
        "names resolve in (`tunebench/hardware/gpus.yaml`: memory, compute capability, rates)")
    opt("--gpu_hour_usd", group="planning", only=PLAN, type=float, metavar="USD",
        help="the target's price per GPU hour, for "
        "`proj_usd_per_million_tokens` (no prices are shipped; several targets: `usd_per_hour` in --gpu_table)")
    opt("--project_num_gpus", group="planning", only=PLAN, type=int, default=None, metavar="N",
        help="GPUs of --plan_device to project to (default: each row's own count)")
    opt("--project_parallelism", group="planning", only=PLAN, choices=list(PARALLELISMS), default=None,
        help="how --project_num_gpus GPUs share a one-GPU row's work: DDP replicas or FSDP2 shards (a row measured "
             "on several GPUs keeps its own)")
    opt("--skip_predicted_oom", group="planning", only=RUN, action="store_true",
        help="experiments predicted not to fit are `skipped` with the "
        "predicted peak and the capacity (implies `--plan`)")


def _telemetry_options(opt) -> None:
    opt("--trackers", group="telemetry", only=RUN, nargs="+", choices=TRACKERS.names(), default=None, metavar="NAME",
        help=f"harness trackers to add ({' and '.join(ALWAYS)} always on): {', '.join(TRACKERS.names())}")
    opt("--log_nvidia_smi", group="telemetry", only=RUN, action="store_true",
        help="nvidia-smi sidecar per experiment (= `--memory_logging` "
        "with `nvidia`): a separate poller restricted to the experiment's GPUs, baseline subtracted, always reaped")
    opt("--log_memory_hf", group="telemetry", only=RUN, action="store_true",
        help="HF `skip_memory_metrics=False` columns (costs ~4%% throughput)")
    opt("--memory_logging", group="telemetry", only=RUN, default=os.environ.get("MEMORY_LOGGING", "scanner"),
        metavar="MODES",
        help="comma list of `scanner`, `huggingface`, `nvidia`, `all`, `none` (env `MEMORY_LOGGING`)")
