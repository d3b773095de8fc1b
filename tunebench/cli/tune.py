"""`benchmark.py tune`'s command line: argv → one typed TuneOptions, checked at the edge (exit 2 names the option),
then tunebench.tune, then the summary. The search itself (tunebench.tuning) never sees an argv or a parser."""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from dataclasses import replace

from tunebench.cli.parsing import spellings, text_to_bool
from tunebench.errors import InputError, InputProblem
from tunebench.tuning.option_checks import RANGES
from tunebench.tuning.options import OBJECTIVES, PEFT_CHOICES, TuneOptions

logger = logging.getLogger(__name__)

FLAGS = ("grid",)  # options that take no value


class _UsageError(Exception):
    """argparse's own complaint (a missing option, a wrong type, a bad choice), raised instead of exiting."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line naming the option, not the usage block and a second line
        raise _UsageError(message)


_ARGUMENT = re.compile(r"argument (-[-\w]+)(?:/\S+)?: (.*)", re.S)


# `--help` in groups: what is tuned, the space searched, how the search runs, the files and the output.
TUNE_GROUPS = {"target": "the model and the work", "space": "the search space", "search": "the search",
               "files": "inputs, outputs and logging"}
GROUP_OF = {
    "target": ("--model", "--num_gpus", "--effective_batch", "--max_seq_len", "--objective", "--gpu_hour_price",
               "--device", "--plan_device", "--project_to", "--gpu_table", "--training_data_path",
               "--synthetic_length_distribution"),
    "space": ("--peft", "--lora_ranks", "--micro_batches", "--gradient_checkpointing", "--packing", "--optimizers",
              "--torch_compile"),
    "search": ("--budget_minutes", "--tolerance_pct", "--confirm", "--margin_pct", "--timeout", "--grid"),
    "files": ("--results_output_path", "--defaults_config_path", "--framework_configs_path", "--log_level"),
}


def _option_adder(parser: argparse.ArgumentParser):
    """`opt(*names, **kw)`: an option in its group, its dash spelling too, its checked range in its help."""
    groups = {key: parser.add_argument_group(title) for key, title in TUNE_GROUPS.items()}

    def opt(*names, **kw):
        allowed = RANGES.get(names[0].lstrip("-"))
        if allowed is not None:  # the range option_checks enforces, in --help
            kw["help"] = f"{kw['help']} ({allowed.describe()})"
        group = groups[next(key for key, members in GROUP_OF.items() if names[0] in members)]
        group.add_argument(*spellings(*names), **kw)
    return opt


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="benchmark.py tune", description=(
        "Find the fastest (or cheapest) way to fine-tune a model that fits: the space of PEFT, checkpointing, "
        "micro-batch × accumulation, packing, optimizer, torch.compile, Liger and DDP/FSDP is pruned with the "
        "memory prediction, the likely best points run first as short `steady_state: auto` runs, the leaders get "
        "a confirming run. Writes <out>/tune.csv (ranked), <out>/tune-scenarios.yaml (the winner) and the "
        "experiments as ordinary results (CSV, compare, report, resume)."))

    opt = _option_adder(parser)

    opt("--model", required=True, help="model: `preset:<name>`, a local dir or a hub id")
    opt("--num_gpus", type=int, default=1, help="GPUs (CPU: processes); DDP and FSDP variants when > 1")
    opt("--effective_batch", type=int, default=16, help="samples per optimizer step, all devices")
    opt("--max_seq_len", type=int, default=1024, help="tokens per sequence")
    opt("--peft", choices=PEFT_CHOICES, default="any", help="full fine-tuning, LoRA, or both")
    opt("--objective", choices=sorted(OBJECTIVES), default="tokens_per_second",
        help="what to optimise: steady non-padding tokens/s, steady J per non-padding token (nvidia-smi sidecar), "
        "or $ per million tokens (needs --gpu_hour_price)")
    opt("--gpu_hour_price", type=float, default=None, help="price of one GPU hour, for --objective cost")
    opt("--budget_minutes", type=float, default=None, help="GPU minutes the search may spend (GPUs × wall time "
        "of its experiments); when spent, the best so far is the answer (marked unconfirmed)")
    opt("--results_output_path", default="results-tune", help="results folder (as benchmark.py's)")
    opt("--device", choices=["auto", "cuda", "cpu"], default="auto", help="`auto` = cuda when GPUs are present")
    opt("--plan_device", default=None, help="GPU memory to fit (a name of the GPU table, or a size, e.g. 80GiB); "
        "default the GPU present; a size on CPU is a per-process budget (a GPU name contradicts a CPU run)")
    opt("--project_to", default=None, help="rank the points for this GPU kind (a name of the GPU "
        "table), from the runs here projected onto it (docs/guides/plan.md, \"Projection\"); it also prunes what would "
        "not fit it")
    opt("--gpu_table", default=None, help="a YAML of GPU figures for --project_to and --plan_device (gpus.yaml's "
        "form)")
    opt("--lora_ranks", nargs="+", type=int, default=[16], help="LoRA ranks in the space")
    opt("--micro_batches", nargs="+", type=int, default=None,
        help="per-device micro-batches (default every divisor of the per-device batch)")
    opt("--gradient_checkpointing", nargs="+", default=["false", "true"], help="checkpointing on/off values")
    opt("--packing", nargs="+", default=None, help="packing values (default false, plus true when the data has "
        "rows shorter than --max_seq_len)")
    opt(
        "--optimizers", nargs="+", default=["adamw_torch_fused", "adamw_torch"], help="TrainingArguments `optim` values"
    )
    opt("--torch_compile", nargs="+", default=None, help="torch.compile values (default false true on GPU, false "
        "on CPU)")
    opt("--training_data_path", default="synthetic", help="`synthetic` or a local JSON/JSONL/parquet file")
    opt("--synthetic_length_distribution", default="fixed", help="`fixed` (full rows) or `uniform`")
    opt("--tolerance_pct", type=float, default=5.0, help="a point is screened while its expected objective is "
        "within this many %% of the best measured; leaders within it get a confirming run")
    opt("--confirm", type=int, default=2, help="leaders given a confirming run")
    opt("--margin_pct", type=float, default=2.0, help="least memory margin over the prediction (raised by the "
        "prediction error measured in the folder and by any OOM)")
    opt("--timeout", type=float, default=3600.0, help="per-experiment timeout in seconds")
    opt("--defaults_config_path", default=None, help="defaults.yaml to use (default the repository's)")
    opt("--framework_configs_path", default=None, help="framework_configs.yaml (default the repository's)")
    opt("--grid", action="store_true", help="run every point of the space, predicted to fit or not, with the "
        "standard measurement (the reference a search is judged against); no search")
    opt("--log_level", default="INFO")
    return parser


def _bools(values: list[str] | None, option: str, problems: list[InputProblem]) -> tuple[bool, ...] | None:
    if values is None:
        return None
    try:
        found = tuple(dict.fromkeys(text_to_bool(v) for value in values for v in value.replace(",", " ").split()))
    except Exception:
        problems.append(InputProblem("command line", option, f"expected true/false values, got {values}",
                                     f"e.g. {option} false true"))
        return None
    if not found:
        problems.append(InputProblem("command line", option, "no value given", f"e.g. {option} false true"))
    return found


def usage_problem(message: str) -> InputProblem:
    """argparse's message as a problem naming the option (`--num-gpus` spelt as `--num_gpus`)."""
    match = _ARGUMENT.match(message)
    if match:
        option = "--" + match.group(1).lstrip("-").replace("-", "_")
        return InputProblem("command line", option, match.group(2), f"see benchmark.py tune --help for {option}")
    if message.startswith("the following arguments are required:"):
        missing = message.split(":", 1)[1].strip().split(",")[0].split("/")[0]
        return InputProblem("command line", missing, "required", f"e.g. {missing} preset:llama-tiny")
    return InputProblem("command line", "arguments", message, "see benchmark.py tune --help")


def extra_problem(argv: list[str], extras: list[str]) -> InputProblem:
    """What argparse did not recognise; a stray value right after a flag (`--grid yes`) names the flag."""
    first = extras[0]
    at = len(argv) - 1 - argv[::-1].index(first) if first in argv else 0  # the stray value is the last
    before = argv[at - 1] if at > 0 else ""
    if before.lstrip("-").replace("-", "_") in FLAGS:
        flag = "--" + before.lstrip("-").replace("-", "_")
        return InputProblem("command line", flag, f"takes no value, got {first!r}", f"write {flag} alone")
    return InputProblem("command line", repr(first), "unrecognized argument",
                        "see benchmark.py tune --help for the options")


def parse(argv: list[str]) -> TuneOptions:
    """TuneOptions from the command line, checked as tunebench.tune checks them; InputError with every problem
    found, each naming its option."""
    from tunebench.tuning.option_checks import log_level_problem, value_problems

    try:
        ns, extras = build_parser().parse_known_args(argv)
    except _UsageError as exc:
        raise InputError([usage_problem(str(exc))]) from None
    if extras:
        raise InputError([extra_problem(list(argv), extras)])
    problems: list[InputProblem] = []
    checkpointing = _bools(ns.gradient_checkpointing, "--gradient_checkpointing", problems)
    packing = _bools(ns.packing, "--packing", problems)
    compile_values = _bools(ns.torch_compile, "--torch_compile", problems)
    log_level = os.environ.get("TUNEBENCH_LOG_LEVEL", ns.log_level)
    if log_level != ns.log_level:
        found = log_level_problem(log_level, "log_level (TUNEBENCH_LOG_LEVEL)")
        problems += [found] if found else []
    given = TuneOptions(
        model=ns.model, num_gpus=ns.num_gpus, effective_batch=ns.effective_batch, max_seq_len=ns.max_seq_len,
        peft=ns.peft, objective=ns.objective, gpu_hour_price=ns.gpu_hour_price, budget_minutes=ns.budget_minutes,
        results_output_path=ns.results_output_path, device=ns.device, plan_device=ns.plan_device,
        lora_ranks=tuple(ns.lora_ranks), micro_batches=tuple(ns.micro_batches) if ns.micro_batches else None,
        gradient_checkpointing=checkpointing or (False, True), packing=packing, optimizers=tuple(ns.optimizers),
        torch_compile=compile_values, training_data_path=ns.training_data_path,
        synthetic_length_distribution=ns.synthetic_length_distribution, tolerance_pct=ns.tolerance_pct,
        confirm=ns.confirm, margin_pct=ns.margin_pct, timeout=ns.timeout,
        defaults_config_path=ns.defaults_config_path, framework_configs_path=ns.framework_configs_path,
        log_level=ns.log_level, grid=ns.grid, project_to=ns.project_to, gpu_table=ns.gpu_table,
    )
    # Every value checked at once, in the option's own words (lists as the user gave them, repeats and all).
    problems = value_problems(given) + problems
    if problems:
        raise InputError(problems)
    return replace(given, lora_ranks=tuple(dict.fromkeys(given.lora_ranks)),
                   micro_batches=tuple(dict.fromkeys(given.micro_batches)) if given.micro_batches else None,
                   optimizers=tuple(dict.fromkeys(given.optimizers)), log_level=log_level.upper())


def _input_error(exc: InputError) -> int:
    """One line per problem, each naming the option (or the file and key) and the fix; exit 2."""
    for problem in exc.problems:
        print(f"tunebench tune: {problem}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    from tunebench.api.diagnosis import environment_line
    from tunebench.lifetime.orphan_watchdog import Guardian
    from tunebench.lifetime.stop_signals import HarnessStopped
    from tunebench.tuning import output
    from tunebench.tuning.command import tune

    try:
        options = parse(sys.argv[1:] if argv is None else argv)
    except InputError as exc:
        return _input_error(exc)
    logging.basicConfig(level=options.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        with Guardian():  # every process the search starts goes with the harness, however it is stopped
            result = tune(options, checked=True)
    except InputError as exc:
        return _input_error(exc)
    except HarnessStopped as exc:
        print(f"stopped by {exc}: the CSVs hold every experiment on disk; run the same command to resume",
              file=sys.stderr)
        return 128 + exc.signum
    except KeyboardInterrupt:
        print("interrupted: the CSVs hold every experiment on disk; run the same command to resume", file=sys.stderr)
        return 130
    except OSError as exc:
        print(environment_line(exc), file=sys.stderr)
        return 2
    print(output.summary(result.outcome, result.table, options, result.device_type == "cpu"))
    return 0 if result.winner is not None else 1
