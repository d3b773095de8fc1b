"""The wall-time floor of the default GPU set on one H200, from the rows of a measured run (issue AE, third part).

Splits each ok row's wall into what an overlap gate could hide (the host-side part before the experiment touches the
GPU, and the harness's gap between one experiment's exit and the next one's start) and what it could not (the
GPU-side start-up, `train_runtime`, the exit after training). Usage, from this folder:
    python floor.py call-f/raw_summary-after.csv 122.6 12.8
(the run's whole wall in seconds, and the preload server's own imports measured alone, call H).
"""

from __future__ import annotations

import sys

import pandas as pd


def parts(frame: pd.DataFrame) -> dict[str, float]:
    """Seconds summed over the ok rows, by what a gate before the first GPU touch could or could not hide."""
    rows = frame[frame["status"] == "ok"].sort_values("experiment_start_unix")
    starts, ends = rows["experiment_start_unix"].to_numpy(), rows["experiment_end_unix"].to_numpy()
    return {
        "host side before the GPU (launcher, imports, data)": float(
            (rows["startup_launcher_seconds"] + rows["startup_imports_seconds"] + rows["startup_data_seconds"]).sum()),
        "harness gap between experiments": float((starts[1:] - ends[:-1]).sum()),
        "GPU-side start-up (model, trainer, train set-up)": float(
            (rows["startup_model_seconds"] + rows["startup_trainer_seconds"]
             + rows["startup_train_setup_seconds"]).sum()),
        "train_runtime": float(rows["train_runtime"].sum()),
        "after training, to the process's exit": float(
            (rows["experiment_wall_seconds"] - rows["startup_seconds"] - rows["train_runtime"]).sum()),
        "first experiment start to last experiment end": float(ends[-1] - starts[0]),
    }


def main(path: str, wall: float, server_imports: float) -> None:
    seconds = parts(pd.read_csv(path))
    for name, value in seconds.items():
        print(f"{value:8.2f} s  {name}")
    hideable = seconds["host side before the GPU (launcher, imports, data)"] + \
        seconds["harness gap between experiments"]
    floor = server_imports + seconds["GPU-side start-up (model, trainer, train set-up)"] + \
        seconds["train_runtime"] + seconds["after training, to the process's exit"]
    print(f"{wall:8.2f} s  the run's wall")
    print(f"{wall - hideable:8.2f} s  the wall with a perfect gate (all of the hideable {hideable:.2f} s hidden)")
    print(f"{floor:8.2f} s  floor: the server's imports ({server_imports} s) + GPU-side start-up + train_runtime "
          "+ exits")


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]), float(sys.argv[3]))
