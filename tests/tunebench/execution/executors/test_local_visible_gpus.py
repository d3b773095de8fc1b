"""The harness hands out only the GPUs its own CUDA_VISIBLE_DEVICES names (a fake nvidia-smi listing four)."""

import json
import os
import shlex

import pytest

import tunebench
from tests.fakes import fake_gpus
from tests.fixtures.harness import FAKES, tiny_scenario, write_inputs
from tunebench import cli

# Four GPUs whose nvidia-smi index order is not their PCI order: children are numbered in PCI order.
BUSES = ["00000000:3B:00.0", "00000000:18:00.0", "00000000:86:00.0", "00000000:AF:00.0"]
FOUR = [{**fake_gpus.DEFAULT_GPUS[0], "index": i, "pci_bus_id": bus, "uuid": f"GPU-0000000{i}-aaaa-4000-8000-0"}
        for i, bus in enumerate(BUSES)]


@pytest.fixture
def four_gpus(monkeypatch):
    monkeypatch.setenv("PATH", f"{FAKES}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NVIDIA_SMI_GPUS", json.dumps(FOUR))
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)


def _child_devices(folder) -> dict[int, str]:
    """Each experiment's CUDA_VISIBLE_DEVICES as its command.sh exports it, by GPU count."""
    found = {}
    for script in folder.glob("*/command.sh"):
        words = shlex.split(script.read_text(), comments=True)
        value = next(w.split("=", 1)[1] for w in words if w.startswith("CUDA_VISIBLE_DEVICES="))
        found[len(value.split(","))] = value
    return found


def _dry_run(tmp_path, *counts: int):
    options = write_inputs(tmp_path, [tiny_scenario()])[:-2]  # without `--device cpu`
    matrix = tunebench.Matrix.from_yaml(options[1], defaults=options[3], framework_configs=options[5],
                                        device="cuda", num_gpus=list(counts))
    out = tmp_path / "out"
    return matrix, tunebench.run(matrix, tunebench.RunSettings(results_output_path=str(out), dry_run=True)), out


def test_a_harness_started_on_two_of_four_gpus_uses_only_those(tmp_path, four_gpus, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    matrix, result, out = _dry_run(tmp_path, 1, 2, 4)
    assert [g["pci_bus_id"] for g in FOUR if g["uuid"] in {x.uuid for x in matrix.gpus}] == [BUSES[0], BUSES[3]]
    assert matrix.gpu_slots == [3, 1]  # CUDA ordinal 3 = the highest bus id, AF; ordinal 1 = 3B (nvidia-smi's 0)
    assert _child_devices(out) == {1: "3", 2: "3,1", 4: "0,1,2,3"}
    notes = dict(zip(result.frame["num_gpus"], result.frame["error_messages"], strict=True))
    assert notes[4] == "would be skipped here: needs 4 GPU(s), this machine has 2" and not notes[1] and not notes[2]


def test_unset_every_gpu_is_usable_in_pci_order(tmp_path, four_gpus, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    matrix, _, out = _dry_run(tmp_path, 2)
    assert matrix.gpu_slots == [0, 1, 2, 3] and [g.pci_bus_id for g in matrix.gpus] == sorted(BUSES)
    assert _child_devices(out) == {2: "0,1"}


def test_a_cuda_visible_devices_naming_no_gpu_is_one_clear_error(tmp_path, four_gpus, monkeypatch, capsys):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    options = write_inputs(tmp_path, [tiny_scenario()])[:-2]
    assert cli.main([*options, "--device", "cuda", "--dry_run", "--results_output_path", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "CUDA_VISIBLE_DEVICES" in err and "out of range" in err and "nvidia-smi -L" in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("device", ["cuda", "auto"])
@pytest.mark.parametrize("value", ["", " ", "-1"])
def test_a_cuda_visible_devices_hiding_every_gpu_is_named(tmp_path, four_gpus, monkeypatch, capsys, device, value):
    """Issue AD: `CUDA_VISIBLE_DEVICES=` with --device cuda skipped every row with "this machine has 0", never
    naming the variable docs/guides/clusters.md says is refused."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    options = write_inputs(tmp_path, [tiny_scenario()])[:-2]
    assert cli.main([*options, "--device", device, "--dry_run", "--results_output_path", str(tmp_path / "o")]) == 2
    assert (f"  - environment: CUDA_VISIBLE_DEVICES: {value!r} names no GPU, so none of the 4 nvidia-smi lists may be "
            "used (fix: unset it to use every GPU") in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("value", ["", "-1"])
def test_a_plan_on_a_gpu_host_with_every_gpu_hidden_plans_as_the_cpu_host_does(tmp_path, four_gpus, monkeypatch,
                                                                              capsys, value):
    """`benchmark.py plan` uses no GPU: CUDA_VISIBLE_DEVICES hiding them all (issue AB's check that the device is not
    what makes a GPU host's plan differ) plans the named GPU, byte for byte what a host without GPUs plans."""
    options = write_inputs(tmp_path, [tiny_scenario()])[:-2]
    plan = ["plan", *options, "--plan_device", "NVIDIA H100 80GB HBM3"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    assert cli.main([*plan, "--results_output_path", str(tmp_path / "hidden")]) == 0
    assert "CUDA_VISIBLE_DEVICES" not in capsys.readouterr().err
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    monkeypatch.setenv("PATH", "/nonexistent")  # no nvidia-smi: a host without GPUs
    assert cli.main([*plan, "--results_output_path", str(tmp_path / "none")]) == 0
    hidden, none = ((tmp_path / name / "plan.csv").read_text().splitlines() for name in ("hidden", "none"))
    drop = hidden[0].split(",").index("pred_seconds")  # the planning's own wall time

    def values(lines):
        return [[cell for i, cell in enumerate(line.split(",")) if i != drop] for line in lines]

    assert len(hidden) == 2 and values(hidden) == values(none)
