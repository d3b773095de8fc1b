"""tunebench from Python: plan, run, compare and plot a tiny CPU matrix (CI runs this file: tests/tunebench/test_api.py).

    python examples/python_api.py [OUT]      # OUT: a new folder (default: a temporary one)

It builds a matrix in Python (LoRA and full fine-tuning of the tiny preset model, with and without gradient
checkpointing), predicts its memory, runs it, compares the run with itself as the reference (no regression: exit 0
expected), writes the HTML report and a chart of steady throughput against predicted peak memory.
"""

import sys
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no screen needed
import matplotlib.pyplot as plt  # noqa: E402

import tunebench  # noqa: E402

TINY = {"model_name_or_path": ["preset:llama-tiny"], "max_steps": 8, "max_seq_len": 64, "torch_dtype": "float32",
        "bf16": False, "per_device_train_batch_size": 2, "synthetic_num_samples": 32, "steady_warmup_steps": 2,
        "steady_min_steps": 4, "gradient_checkpointing": False}


def main(out: Path) -> int:
    matrix = tunebench.Matrix.from_scenarios([
        {"name": "full", "framework_config": [None, "gradient-checkpointing"], "arguments": TINY},
        {"name": "lora", "framework_config": [None], "arguments": {**TINY, "peft_method": "lora", "r": 8,
                                                                     "lora_alpha": 16}},
    ], device="cpu")
    plan = tunebench.plan(matrix, plan_device="4GiB")  # a per-process budget on CPU
    print(plan[["scenario", "framework_config", "pred_mem_peak", "pred_fits"]].to_string(index=False))

    result = tunebench.run(matrix, tunebench.RunSettings(results_output_path=str(out / "run"), plan=True))
    frame = result.frame
    print(frame[["scenario", "framework_config", "status", "steady_tokens_per_second"]].to_string(index=False))
    if not (frame["status"] == "ok").all():
        print("an experiment failed: see", result.paths["raw_summary"], file=sys.stderr)
        return 1

    verdict = tunebench.compare(result.paths["raw_summary"], result.paths["folder"],
                                tunebench.CompareOptions(out=str(out / "compare"), charts=False))
    print(f"compare against itself: exit code {verdict.exit_code}, {len(verdict.regressions)} regression(s)")
    report = tunebench.report(result.paths["folder"])

    figure, axes = plt.subplots(figsize=(6, 4))
    labels = frame["scenario"] + "/" + frame["framework_config"]
    axes.scatter(frame["pred_mem_peak"] / 2**20, frame["steady_tokens_per_second"])
    for label, x, y in zip(labels, frame["pred_mem_peak"] / 2**20, frame["steady_tokens_per_second"], strict=True):
        axes.annotate(label, (x, y))
    axes.set_xlabel("predicted peak memory (MiB)")
    axes.set_ylabel("steady tokens/s")
    chart = out / "throughput-vs-memory.png"
    figure.savefig(chart, dpi=100, bbox_inches="tight")
    print(f"wrote {report} and {chart}")
    return verdict.exit_code


if __name__ == "__main__":
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="tunebench-example-"))
    folder.mkdir(parents=True, exist_ok=True)
    sys.exit(main(folder))
