"""Writes docs/evidence/fms-acceleration-h200.md's tables from this folder's CSVs (the H200 runs, the CPU host's plans)
and fms-acceleration's published A100 reference (refs/fms/a100_80gb.csv).

    python docs/evidence/fms-acceleration-h200/make_doc.py   # prints the tables (markdown)
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
CONFIGS = ["none", "baseline-peft-bnb", "accelerated-peft-bnb", "accelerated-peft-bnb-foak",
           "accelerated-peft-autogptq", "accelerated-peft-autogptq-foak"]
MODELS = ["preset:mistral-7b", "preset:llama-3.2-1b"]
GIB = 2**30


def measured() -> pd.DataFrame:
    frames = [pd.read_csv(HERE / name) for name in ("one-gpu-raw_summary.csv", "two-gpus-raw_summary.csv",
                                                     "two-gpus-gptq-raw_summary.csv")]
    return pd.concat(frames, ignore_index=True)


def planned() -> pd.DataFrame:
    frames = [pd.read_csv(path) for path in sorted(HERE.glob("plan-*/plan.csv"))]
    keys = ["scenario", "framework_config", "model_name_or_path", "num_gpus", "pred_mem_peak", "pred_note"]
    return pd.concat(frames, ignore_index=True)[keys] if frames else pd.DataFrame(columns=keys)


def _gib(value) -> str:
    return "" if pd.isna(value) else f"{value / GIB:.2f}"


def rows_table(frame: pd.DataFrame) -> str:
    lines = ["| GPUs | model | config | status | steady tok/s/GPU | HF tok/s/GPU | step CV % | peak GiB | plan GiB | "
             "plan err % | loss vs baseline |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for _, row in frame.iterrows():
        ok = row["status"] == "ok"
        peak, plan = row.get("mem_peak_torch_max_allocated_bytes"), row.get("pred_mem_peak")
        error = f"{100 * (plan - peak) / peak:+.3f}" if ok and pd.notna(plan) and pd.notna(peak) else ""
        if "foak" in row["framework_config"] and error:
            error += " (bound)"
        parity = ""
        if ok and pd.notna(row.get("loss_parity_max_rel_diff")):
            verdict = "inside" if row["loss_parity_ok"] else "flagged"
            parity = f"{100 * row['loss_parity_max_rel_diff']:.3f} % ({verdict})"
        status = row["status"] if ok else f"{row['status']}: {str(row.get('error_messages'))[:70]}"
        lines.append(
            f"| {row['num_gpus']} | {row['model_name_or_path'].removeprefix('preset:')} | {row['framework_config']}"
            f"{' · adamw_torch' if row.get('optim') == 'adamw_torch' else ''} | "
            f"{status} | {_num(row, 'steady_nonpad_tokens_per_second_per_device')} | "
            f"{_num(row, 'train_tokens_per_second_per_device')} | {_num(row, 'steady_step_time_robust_cv', 100, 2)} | "
            f"{_gib(peak) if ok else ''} | {_gib(plan)} | {error} | {parity} |")
    return "\n".join(lines)


def _num(row, column: str, scale: float = 1.0, digits: int = 0) -> str:
    value = row.get(column)
    return "" if pd.isna(value) else f"{value * scale:,.{digits}f}"


def ratios_table(frame: pd.DataFrame, reference: pd.DataFrame) -> str:
    """Each config's steady tokens/s per GPU over baseline-peft-bnb's, beside fms's published A100 ratios
    (Mistral-7B; 1 GPU x 4, 2 GPUs x 2)."""
    lines = ["| config | H200 mistral-7b 1 GPU | fms A100 Mistral-7B 1 GPU | H200 mistral-7b 2 GPUs | "
             "fms A100 2 GPUs | H200 llama-3.2-1b 1 GPU | H200 llama-3.2-1b 2 GPUs |",
             "|---|---|---|---|---|---|---|"]
    for config in CONFIGS:
        cells = []
        for model, gpus in (("preset:mistral-7b", 1), ("ref", 1), ("preset:mistral-7b", 2), ("ref", 2),
                            ("preset:llama-3.2-1b", 1), ("preset:llama-3.2-1b", 2)):
            source = reference if model == "ref" else frame
            column = "train_tokens_per_second_per_device" if model == "ref" else \
                "steady_nonpad_tokens_per_second_per_device"
            pick = source[(source.num_gpus == gpus) & (source.peft_method == "lora")
                          & ((source.model_name_or_path == "preset:mistral-7b")
                                                       if model == "ref" else (source.model_name_or_path == model))]
            if model == "ref":
                pick = pick[pick.per_device_train_batch_size == 4 // gpus]
            if model != "ref" and gpus == 2 and (pick.framework_config == config).any():
                # a row's baseline ran in its own scenario (the GPTQ rows and theirs with adamw_torch)
                ok_rows = pick[(pick.framework_config == config) & (pick.status == "ok")]
                scenario = (ok_rows if not ok_rows.empty else pick[pick.framework_config == config]).scenario.iloc[0]
                pick = pick[pick.scenario == scenario]
            value = pick[pick.framework_config == config][column]
            base = pick[pick.framework_config == "baseline-peft-bnb"][column]
            ok = not value.empty and not base.empty and pd.notna(value.iloc[0]) and pd.notna(base.iloc[0])
            cells.append(f"{value.iloc[0] / base.iloc[0]:.3f}" if ok else "—")
        lines.append(f"| {config} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    from tunebench.results.compare.reading import load_csv

    frame = measured()
    plans = planned()
    if not plans.empty:
        frame = frame.drop(columns=[c for c in ("pred_mem_peak", "pred_note") if c in frame.columns]).merge(
            plans, on=["scenario", "framework_config", "model_name_or_path", "num_gpus"], how="left")
    frame["order"] = frame.framework_config.map(CONFIGS.index) + 10 * frame.model_name_or_path.map(MODELS.index)
    frame = frame.sort_values(["num_gpus", "scenario", "order"])
    reference = load_csv(REPO / "refs" / "fms" / "a100_80gb.csv", "reference")
    print(rows_table(frame))
    print()
    print(ratios_table(frame, reference))


if __name__ == "__main__":
    main()
