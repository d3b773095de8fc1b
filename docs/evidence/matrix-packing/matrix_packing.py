"""Matrix wall time against its ideal packing (issue G): `wall / ideal` for a matrix run side by side.

ideal = max(Σ over experiments of slots × wall seconds ÷ slots, the longest single experiment): no schedule
can finish sooner. The default matrix is four 1-slot experiments and one 2-slot experiment on 2 slots (CPU
process slots here; GPUs with --device cuda), run through the real harness with --max_concurrent 2.

  python docs/evidence/matrix-packing/matrix_packing.py --out /tmp/packing [--device cpu|cuda] [--steps 40]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[3]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--model", default=None, help="default: llama-tiny on CPU, llama-3.2-1b on GPU")
    a = p.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    cpu = a.device == "cpu"
    model = a.model or ("preset:llama-tiny" if cpu else "preset:llama-3.2-1b")
    common = {"model_name_or_path": [model], "max_steps": a.steps}
    if cpu:
        common.update(torch_dtype="float32", bf16=False, max_seq_len=128, synthetic_num_samples=256)
    sys.path.insert(0, str(REPO))
    from tunebench.execution.executors.local import LocalSettings
    from tunebench.execution.experiment_run import RunOptions
    from tunebench.execution.runner import run_matrix
    from tunebench.matrix.expansion import Matrices, expand
    from tunebench.matrix.inputs import Scenario, load_defaults, load_framework_configs
    from tunebench.matrix.validation import typed

    problems: list = []
    defaults = load_defaults(REPO / "defaults.yaml", problems)
    configs = load_framework_configs(REPO / "framework_configs.yaml", problems)
    ones = [Scenario(f"one-{i}", [None], {**common, "seed": i}) for i in range(4)]
    experiments = expand(ones, configs, defaults, {}, Matrices([1]), a.device, {}, problems)
    experiments += expand([Scenario("two", ["ddp"], common)], configs, defaults, {}, Matrices([2]), a.device, {},
                          problems)
    assert not problems, problems
    experiments = typed(experiments, cuda_here=not cpu)
    gpus = [] if cpu else [0, 1]
    rows = run_matrix(experiments, RunOptions(output_dir=out / "results", settings=(LocalSettings(max_concurrent=2),),
                                              cpu_slots=2, available_gpus=gpus, resume=False, timeout_seconds=1800))
    frame = pd.DataFrame(rows)
    spans = frame[["experiment_start_unix", "experiment_end_unix", "num_gpus"]]
    slot_seconds = float(((spans.experiment_end_unix - spans.experiment_start_unix) * spans.num_gpus).sum())
    longest = float((spans.experiment_end_unix - spans.experiment_start_unix).max())
    ideal = max(slot_seconds / 2, longest)
    wall = float(spans.experiment_end_unix.max() - spans.experiment_start_unix.min())
    report = {"device": a.device, "slots": 2, "experiments": len(frame), "statuses": frame.status.tolist(),
              "wall_seconds": wall, "ideal_seconds": ideal, "wall_over_ideal": wall / ideal,
              "slot_seconds": slot_seconds, "concurrent_experiments": frame.concurrent_experiments.tolist()}
    (out / "packing.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
