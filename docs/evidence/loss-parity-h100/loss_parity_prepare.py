"""One pass of the issue-45 GPU evidence: its scenarios and framework configs, written for benchmark.py.

  python3 docs/evidence/loss-parity-h100/loss_parity_prepare.py --step 1b --pass plain --out .work/z

Reads docs/evidence/loss-parity-h100/scenarios-loss-parity.yaml and merges
docs/evidence/loss-parity-h100/framework-loss-parity.yaml into the shipped framework_configs.yaml. A step runs some
scenarios (STEPS). The `plain` pass keeps the configs that do not need bitsandbytes (PEFT and TRL are then preloaded
once for the matrix), the `bnb` pass only those that do (8-bit AdamW, quantized bases: every experiment imports them
itself). liger-kernels is left out, with a line saying so, where liger_kernel does not import. Writes
<out>/scenarios-<pass>.yaml and <out>/framework_configs.yaml; prints what it left out.
"""

import argparse
import importlib.util
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(REPO))

from tunebench.experiment.acceleration import needs_bitsandbytes  # noqa: E402

STEPS = {"1b": ("z-speed-1b", "z-full-1b", "z-lora-1b"), "7b": ("z-lora-8b", "z-full-7b", "z-packed-1b")}
STEPS["8b-long"] = ("z-lora-8b-long",)
STEPS["fp32"] = ("z32-full-1b", "z32-lora-8b")  # the same comparisons in float32, packed over four GPUs
STEPS["fp32-compile"] = ("z32-compile-1b",)
STEPS["fp32-7b"] = ("z32-full-7b",)  # one H200 (nvidia-h200, needs_h200)
STEPS["fp32-bits"] = ("z32b-lora-8b", "z32b-full-1b")  # last-bit bands, four GPUs
STEPS["all"] = STEPS["1b"] + STEPS["7b"]  # one harness for both, packed over several GPUs (MAX_CONCURRENT)


def framework_configs() -> dict:
    shipped = yaml.safe_load((REPO / "framework_configs.yaml").read_text())["framework_configs"]
    extra = yaml.safe_load((HERE / "framework-loss-parity.yaml").read_text())["framework_configs"]
    return {**shipped, **extra}


def uses_bitsandbytes(config: dict) -> bool:
    arguments = config.get("arguments", {})
    return bool(arguments.get("load_in_4bit") or arguments.get("load_in_8bit")) or \
        needs_bitsandbytes(str(arguments.get("optim") or ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--step", choices=sorted(STEPS), required=True)
    parser.add_argument("--pass", dest="which", choices=["plain", "bnb"], required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    configs = framework_configs()
    liger = importlib.util.find_spec("liger_kernel") is not None
    scenarios = yaml.safe_load((HERE / "scenarios-loss-parity.yaml").read_text())["scenarios"]
    kept = []
    for scenario in scenarios:
        if scenario["name"] not in STEPS[args.step]:
            continue
        names = []
        for name in scenario["framework_config"]:
            bnb = name is not None and uses_bitsandbytes(configs[name])
            if name == "liger-kernels" and not liger:
                print(f"{scenario['name']}: liger-kernels left out: liger_kernel does not import here (carry "
                      "liger-kernel==0.8.5 in .whl to run it)")
            elif bnb == (args.which == "bnb"):
                names.append(name)
        if names:
            kept.append({**scenario, "framework_config": names})
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"scenarios-{args.which}.yaml").write_text(yaml.safe_dump({"scenarios": kept}, sort_keys=False))
    (args.out / "framework_configs.yaml").write_text(yaml.safe_dump({"framework_configs": configs}, sort_keys=False))
    print(f"{args.which} pass of step {args.step}: " + "; ".join(
        f"{s['name']}: {', '.join(str(n) for n in s['framework_config'])}" for s in kept))


if __name__ == "__main__":
    main()
