"""The tables of docs/evidence/loss-parity-h100.md from an issue-45 evidence run's raw_summary.csv.

  python3 docs/evidence/common/loss_parity_doc.py RESULTS/raw_summary.csv > loss-parity-tables.md

Per scenario: every row's steady tokens/s against the baseline, the loss from step 1 to the last, its largest
relative difference from the baseline against the tolerance (twice the band of the baseline's band runs), the
verdict against what the setting is expected to do (reorder-only settings inside, numerics-changing ones
flagged) and the time to the target loss. Then the learnable corpus's throughput against the uniform corpus's,
with the band runs' own spread as the noise it is judged against.
"""

import sys

import pandas as pd

REORDER_ONLY = {"loss-band-1", "loss-band-2", "loss-band-3", "gradient-checkpointing", "liger-kernels", "attn-eager",
                "torch-compile"}
CHANGES_NUMERICS = {"adamw-8bit", "qlora", "packing-wrapped", "adam-beta2-0.95", "corpus-uniform"}


def expected(config: str) -> str:
    if config in REORDER_ONLY:
        return "inside"
    return "flagged" if config in CHANGES_NUMERICS else "–"


def number(value, fmt: str) -> str:
    return "–" if pd.isna(value) else format(value, fmt)


def scenario_table(rows: pd.DataFrame) -> list[str]:
    base = rows[rows["framework_config"] == "none"]
    base_tps = base["steady_nonpad_tokens_per_second"].iloc[0] if len(base) else float("nan")
    lines = ["| config | tokens/s | × | loss 1 → last | max rel. diff | tolerance (band) | verdict | expected | "
             "steps / tokens / s to target |", "|---|---|---|---|---|---|---|---|---|"]
    for row in rows.to_dict("records"):
        config = row["framework_config"]
        if row["status"] != "ok":
            lines.append(f"| {config} | {row['status']}: {str(row.get('error_messages'))[:120]} |||||||")
            continue
        ok = row.get("loss_parity_ok")
        verdict = "–" if pd.isna(ok) else ("inside" if str(ok).lower() == "true" else "flagged")
        want = expected(config)
        mark = "" if want in ("–", verdict) or config == "none" else " ✗"
        target = (f"{number(row.get('loss_target_steps'), '.0f')} / {number(row.get('loss_target_tokens'), ',.0f')} / "
                  f"{number(row.get('loss_target_seconds'), '.1f')}")
        if pd.isna(row.get("loss_target_steps")):
            target += f" ({row.get('loss_target_note')})"
        lines.append(
            f"| {config} | {number(row.get('steady_nonpad_tokens_per_second'), ',.0f')} | "
            f"{number(row.get('steady_nonpad_tokens_per_second') / base_tps, '.3f')} | "
            f"{number(row.get('loss_first_step'), '.3f')} → {number(row.get('train_loss_last_step'), '.3f')} | "
            f"{number(row.get('loss_parity_max_rel_diff'), '.2e')} | {number(row.get('loss_parity_tolerance'), '.2e')}"
            f" ({number(row.get('loss_parity_band'), '.2e')}) | {verdict}{mark} | {want} | {target} |")
    return lines


def throughput_check(frame: pd.DataFrame) -> list[str]:
    # z-speed-1b: the pair alone on the machine (older runs had it inside z-full-1b)
    scenario = "z-speed-1b" if (frame["scenario"] == "z-speed-1b").any() else "z-full-1b"
    rows = frame[(frame["scenario"] == scenario) & (frame["status"] == "ok")].set_index("framework_config")
    if not {"none", "corpus-uniform"} <= set(rows.index):
        return [f"{scenario}: no baseline and corpus-uniform pair: no throughput comparison."]
    tps = rows["steady_nonpad_tokens_per_second"]
    markov = [tps[c] for c in ("none", "loss-band-1", "loss-band-2") if c in tps.index]
    ratio = tps["none"] / tps["corpus-uniform"]
    mean = sum(markov) / len(markov)
    return [f"{scenario} steady tokens/s: learnable corpus {', '.join(f'{v:,.0f}' for v in markov)} (baseline and "
            f"band runs: spread {100 * (max(markov) - min(markov)) / mean:.2f} %), uniform corpus "
            f"{tps['corpus-uniform']:,.0f}: baseline ÷ uniform = {ratio:.4f} ({100 * (ratio - 1):+.2f} %), mean of the "
            f"learnable runs ÷ uniform = {mean / tps['corpus-uniform']:.4f}. Within 1 %: "
            f"{'yes' if abs(mean / tps['corpus-uniform'] - 1) <= 0.01 else 'no'}."]


def main(path: str) -> None:
    frame = pd.read_csv(path)
    for scenario, rows in frame.groupby("scenario", sort=False):
        first = rows.iloc[0]
        print(f"\n### {scenario}: {first['model_name_or_path']}, {first['peft_method']}, batch "
              f"{first['per_device_train_batch_size']} × {first['max_seq_len']}, floor "
              f"{number(first.get('data_entropy_floor_nats'), '.3f')} nats, target "
              f"{number(first.get('loss_target'), '.3f')}\n")
        print("\n".join(scenario_table(rows)))
    print()
    print("\n".join(throughput_check(frame)))


if __name__ == "__main__":
    main(sys.argv[1])
