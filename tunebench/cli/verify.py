"""`benchmark.py verify`: the scanner and torch's MemTracker on the same step of a preset, plus the scan's cost.

  python benchmark.py verify [--model preset:llama-3.2-1b] [--peft lora] [--gradient_checkpointing]
                             [--batch 8] [--seq 1024] [--grad_accum 1] [--steps 16] [--out verify.json]

Run 1 puts the scanner's memory scan and MemTracker on the same optimizer step of one run and prints the
difference per category. Run 2 (no MemTracker, which slows its step ~70×) times every step and reports how much
slower the memory-scanned step is than the median unscanned step, and how far the scanner's reported (phase-
timed) step is from that median. Exit 0 when every category is within --tolerance, 1 otherwise, 2 on bad input.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import sys
from pathlib import Path

from tunebench.bounds import Range
from tunebench.cli.parsing import Parser, option_problems, parse
from tunebench.verify.runs import QUANTIZED_BASES, VerifyOptions, verify

logger = logging.getLogger(__name__)

# Every numeric option's range (tunebench.cli.parsing): NaN, infinities and absurd values are exit 2.
VERIFY_RANGES = {"--batch": Range(1, 4096), "--seq": Range(1, 2**20), "--grad_accum": Range(1, 1024),
                 "--steps": Range(5, 10_000), "--scan_step": Range(2, 1000), "--tolerance": Range(0, 1, low_open=True)}
# The synthetic rows are built in memory before training (steps × batch × grad_accum rows of seq tokens).
MAX_TOKENS = 2**27


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="benchmark.py verify", description=__doc__.splitlines()[0])
    p = parser.add_argument_group("the step measured")
    p.add_argument(
        "--model", default=None, help="preset or local dir (default: llama-3.2-1b on GPU, llama-tiny on CPU)"
    )
    p.add_argument(
        "--peft", choices=["none", "lora"], default="none", help="LoRA adapters on the attention projections"
    )
    p.add_argument("--gradient_checkpointing", action="store_true", help="checkpoint every decoder layer")
    p.add_argument("--quantization", choices=sorted(QUANTIZED_BASES), default="none",
                   help="a bitsandbytes-quantized base (with --peft lora), as the framework configs of that name")
    p.add_argument("--batch", type=int, default=None, help="micro-batch (default 8 on GPU, 2 on CPU)")
    p.add_argument("--seq", type=int, default=None, help="sequence length (default 1024 on GPU, 64 on CPU)")
    p.add_argument("--grad_accum", type=int, default=1, help="micro-batches per optimizer step")
    p = parser.add_argument_group("the check")
    p.add_argument("--steps", type=int, default=16, help="steps of the timing run (scan on step 4)")
    p.add_argument("--scan_step", type=int, default=4, help="the optimizer step scanned and tracked")
    p.add_argument("--tolerance", type=float, default=0.03, help="largest accepted relative difference per category "
                   "(0.03: ±3 %%)")
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto", help="`auto`: cuda when one is visible")
    p.add_argument("--out", default=None, help="also write the full result as JSON here")
    return parser


def input_problems(args) -> list[str]:
    """Every bad option, each as one line naming it and the fix (all at once); [] when every option is usable."""
    from tunebench.experiment.model_config import config_problem
    from tunebench.experiment.models import resolve_model_source

    problems = [f"{found.key} {found.message.removeprefix('out of range: ')}: out of range (fix: {found.fix})"
                for found in option_problems(args, VERIFY_RANGES)]
    if problems:  # the checks below combine the numbers: out-of-range ones would only repeat themselves
        return problems + _model_problems(args, resolve_model_source, config_problem)
    if args.steps < args.scan_step + 3:
        problems.append("needs --steps >= --scan_step + 3 (fix: e.g. --steps 16)")
    tokens = args.steps * (args.batch or 8) * args.grad_accum * (args.seq or 1024)
    if tokens > MAX_TOKENS:
        problems.append(f"--steps × --batch × --grad_accum × --seq = {tokens:,} tokens, more than the "
                        f"{MAX_TOKENS:,} verify builds in memory (fix: smaller values)")
    return problems + _model_problems(args, resolve_model_source, config_problem)


def _model_problems(args, resolve_model_source, config_problem) -> list[str]:
    """What is wrong with --model and the base it asks for."""
    problems = []
    if args.quantization != "none" and args.peft != "lora":
        problems.append(f"--quantization {args.quantization}: a quantized base trains LoRA adapters only (fix: add "
                        "--peft lora)")
    if args.quantization != "none" and importlib.util.find_spec("bitsandbytes") is None:
        problems.append(f"--quantization {args.quantization}: bitsandbytes is not installed (fix: pip install "
                        "'tunebench[quant]')")
    try:
        resolve_model_source(args.model)
    except ValueError as exc:
        return problems + [f"--model: {exc} (fix: a preset such as preset:llama-tiny, or a local folder with "
                           "config.json)"]
    if not args.model.startswith("preset:") and not Path(args.model).is_dir():
        return problems + [f"--model {args.model!r}: verify builds models offline from a preset or a local folder "
                           "(fix: one of those)"]
    found = None if args.model.startswith("preset:") else config_problem(args.model)
    return problems + ([f"--model: {found[0]} (fix: {found[1]})"] if found else [])


def main(argv: list[str] | None = None) -> int:
    from concurrent.futures.process import BrokenProcessPool

    import torch

    from tunebench.fileio import write_atomic
    from tunebench.verify.output import quiet_libraries, report

    args = parse(build_parser(), argv)
    if isinstance(args, int):
        return args
    args.cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    if args.device == "cuda" and not torch.cuda.is_available():
        print("benchmark.py verify: --device cuda but no CUDA GPU is visible (fix: --device cpu)", file=sys.stderr)
        return 2
    args.model = args.model or ("preset:llama-3.2-1b" if args.cuda else "preset:llama-tiny")
    problems = input_problems(args)
    if len(problems) == 1:
        print(f"benchmark.py verify: {problems[0]}", file=sys.stderr)
    elif problems:
        print(f"benchmark.py verify: {len(problems)} problem(s); nothing was run:\n" +
              "\n".join(f"  - {problem}" for problem in problems), file=sys.stderr)
    if problems:
        return 2
    args.batch = args.batch or (8 if args.cuda else 2)
    args.seq = args.seq or (1024 if args.cuda else 64)
    logging.basicConfig(level="WARNING")
    quiet_libraries()
    options = VerifyOptions(model=args.model, cuda=args.cuda, batch=args.batch, seq=args.seq, peft=args.peft,
                            gradient_checkpointing=args.gradient_checkpointing, quantization=args.quantization,
                            grad_accum=args.grad_accum, steps=args.steps, scan_step=args.scan_step)
    try:
        result = verify(options)
    except torch.OutOfMemoryError as exc:
        print(f"benchmark.py verify: out of memory with {args.model} (batch {args.batch}, sequence {args.seq}): "
              f"{str(exc).splitlines()[0][:200]} (fix: a smaller --batch or --seq, --gradient_checkpointing, or "
              "a GPU with more memory)", file=sys.stderr)
        return 1
    except BrokenProcessPool:
        # The memory run's process died without a Python error: the kernel's OOM killer (host memory) or a
        # signal. Its own stderr above says more when there is more to say.
        print(f"benchmark.py verify: the memory run of {args.model} (batch {args.batch}, sequence {args.seq}) died "
              "without an error, most often out of host memory (fix: a smaller model, --batch or --seq, or a "
              "host with more memory)", file=sys.stderr)
        return 1
    text, passed = report(result, args.tolerance)
    print(text)
    if args.out:
        write_atomic(args.out, json.dumps(result, indent=2))
    return 0 if passed else 1
