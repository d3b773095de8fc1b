"""Poll-log parsing, calibration, energy integral and CUDA_VISIBLE_DEVICES → nvidia-smi GPU mapping."""

import json
import logging
import os
from datetime import datetime

import pytest

from tests.fixtures.harness import FAKES
from tunebench.telemetry.gpus import GpuInfo, query_gpus, resolve_visible_gpus, usable_gpus
from tunebench.telemetry.poll_log import parse_poll_text, summarize_poll_log

UUID_A = "GPU-aaaaaaaa-0000-4000-8000-000000000001"
UUID_B = "GPU-bbbbbbbb-0000-4000-8000-000000000002"
UUID_C = "GPU-cccccccc-0000-4000-8000-000000000003"


def line(ts, index, uuid, used, util, power, bus="00000000:07:00.0", total=81559):
    return f"{ts}, {index}, {uuid}, {bus}, {used}, {total}, {util}, {power}"


# Realistic nvidia-smi lines (two GPUs interleaved and out of order, a GPU outside the experiment,
# crossing midnight and a year boundary) plus every kind of junk, ending with a line cut mid-write.
# Timestamps are multiples of 1/8 s so that every Δt and product below is exact in binary floating point.
GOOD = [
    line("2024/12/31 23:59:59.750", 0, UUID_A, 1000, 10, "100.00"),
    line("2024/12/31 23:59:59.750", 1, UUID_B, 2000, 60, "300.00", bus="00000000:2A:00.0"),
    line("2024/12/31 23:59:59.750", 2, UUID_C, 9999, 99, "999.00", bus="00000000:3B:00.0"),
    line("2025/01/01 00:00:00.125", 0, UUID_A, 9000, 30, "200.00"),  # out of order on purpose
    line("2024/12/31 23:59:59.875", 0, UUID_A, 5000, 20, "200.00"),
    line("2025/01/01 00:00:00.250", 1, UUID_B, 4000, 80, "100.00", bus="00000000:2A:00.0"),
    line("2025/01/01 00:00:00.500", 0, UUID_A, 7000, 40, "40.00"),
]
JUNK = [
    "garbage",  # wrong field count
    "2025/01/01 00:00:00.600, 0, " + UUID_A,  # truncated
    line("not a time", 0, UUID_A, 1, 1, "1.00"),  # bad timestamp
    line("2025/01/01 00:00:00.600", 0, UUID_A, "[N/A]", 1, "1.00"),  # no memory value
    line("2025/01/01 00:00:00.600", 0, "", 1, 1, "1.00"),  # no uuid
]
HEADER = "timestamp,index,uuid,pci.bus_id,memory.used,memory.total,utilization.gpu,power.draw"
PARTIAL_TAIL = line("2025/01/01 00:00:00.625", 0, UUID_A, 99999, 40, "40.00")[:-3]  # "40.00" → "40"
POLL_TEXT = "\n".join([HEADER, GOOD[0], JUNK[0], *GOOD[1:4], *JUNK[1:], *GOOD[4:]]) + "\n" + PARTIAL_TAIL


@pytest.fixture
def poll_csv(tmp_path):
    path = tmp_path / "nvidia_smi.csv"
    path.write_text(POLL_TEXT)
    return path


def test_parse_keeps_realistic_lines_and_counts_junk():
    poll = parse_poll_text(POLL_TEXT)
    assert poll.malformed_lines == len(JUNK) + 1  # + the line cut mid-write
    assert len(poll.frame) == len(GOOD)
    row = poll.frame.iloc[0]
    assert row["timestamp"] == datetime(2024, 12, 31, 23, 59, 59, 750000)
    assert (row["index"], row["uuid"], row["pci.bus_id"]) == (0, UUID_A, "00000000:07:00.0")
    assert (row["memory.used"], row["memory.total"], row["utilization.gpu"], row["power.draw"]) == (
        1000.0,
        81559.0,
        10.0,
        100.0,
    )


def test_not_available_power_is_kept_as_missing_not_malformed():
    poll = parse_poll_text(line("2025/01/01 00:00:00.000", 0, UUID_A, 10, "[N/A]", "[Not Supported]") + "\n")
    assert poll.malformed_lines == 0
    assert len(poll.frame) == 1
    assert poll.frame["power.draw"].isna().all() and poll.frame["utilization.gpu"].isna().all()


def test_summary_calibration_utilisation_and_energy_exact(poll_csv):
    # Hand-computed truth. GPU A (cuda:0): peak 9000 − baseline 1000 = 8000 MiB; util mean (10+20+30+40)/4;
    # energy on t = 0, .125, .375, .75 s with P = 100, 200, 200, 40 W:
    #   (100+200)/2·0.125 + (200+200)/2·0.25 + (200+40)/2·0.375 = 18.75 + 50 + 45 = 113.75 J.
    # GPU B (cuda:1): peak 4000 − 500 = 3500 MiB; util (60+80)/2; energy (300+100)/2·0.5 = 100 J.
    out = summarize_poll_log(poll_csv, {UUID_A: 1000.0, UUID_B: 500.0}, nonpad_tokens=855)
    assert out == {
        "mem_nvidia_mem_reserved": (8000.0 + 3500.0) / 2,
        "mem_nvidia_mem_reserved_max": 8000.0,
        "mem_nvidia_mem_reserved_gpu0": 8000.0,
        "mem_nvidia_mem_reserved_gpu1": 3500.0,
        "nvidia_gpu_util_mean": (25.0 + 70.0) / 2,
        "energy_joules": 213.75,
        "energy_joules_per_nonpad_token": 213.75 / 855,
        "nvidia_smi_malformed_lines": len(JUNK) + 1,
        "nvidia_smi_samples": 6,  # GPU C's line is not the experiment's
    }


def test_summary_gpu_positions_follow_experiment_order(poll_csv):
    # _gpu<i> is the position in the experiment's GPU list (cuda:i), not nvidia-smi's index.
    out = summarize_poll_log(poll_csv, {UUID_B: 500.0, UUID_A: 1000.0}, nonpad_tokens=None)
    assert out["mem_nvidia_mem_reserved_gpu0"] == 3500.0
    assert out["mem_nvidia_mem_reserved_gpu1"] == 8000.0
    assert out["energy_joules_per_nonpad_token"] is None


def test_energy_window_restricts_the_integral(poll_csv):
    # Window [23:59:59.875, 00:00:00.375] keeps GPU A's samples at .875 and .125: (200+200)/2·0.25 = 50 J.
    start = datetime(2024, 12, 31, 23, 59, 59, 875000).timestamp()
    end = datetime(2025, 1, 1, 0, 0, 0, 375000).timestamp()
    out = summarize_poll_log(poll_csv, {UUID_A: 1000.0}, 100, energy_window=(start, end))
    assert out["energy_joules"] == 50.0
    assert out["energy_joules_per_nonpad_token"] == 0.5
    assert out["mem_nvidia_mem_reserved"] == 8000.0  # memory still covers the whole run


def test_aggregates_are_none_when_a_gpu_has_no_data(tmp_path, caplog):
    path = tmp_path / "poll.csv"
    path.write_text(
        "\n".join(
            [
                line("2025/01/01 00:00:00.000", 0, UUID_A, 300, "[N/A]", "[N/A]"),
                line("2025/01/01 00:00:00.100", 0, UUID_A, 700, "[N/A]", "[N/A]"),
            ]
        )
        + "\n"
    )
    with caplog.at_level(logging.WARNING):
        out = summarize_poll_log(path, {UUID_A: 100.0, UUID_B: 100.0}, 10)
    assert out["mem_nvidia_mem_reserved_gpu0"] == 600.0
    assert out["mem_nvidia_mem_reserved_gpu1"] is None
    # A mean over half the GPUs would masquerade as the mean over all of them.
    assert out["mem_nvidia_mem_reserved"] is None and out["mem_nvidia_mem_reserved_max"] is None
    assert out["nvidia_gpu_util_mean"] is None and out["energy_joules"] is None
    assert "no samples for GPU " + UUID_B in caplog.text


def test_peak_below_baseline_is_clipped_to_zero(tmp_path, caplog):
    path = tmp_path / "poll.csv"
    path.write_text(line("2025/01/01 00:00:00.000", 0, UUID_A, 300, 5, "60.00") + "\n")
    with caplog.at_level(logging.WARNING):
        out = summarize_poll_log(path, {UUID_A: 1000.0}, 10)
    assert out["mem_nvidia_mem_reserved_gpu0"] == 0.0
    assert out["energy_joules"] is None  # one sample spans no time
    assert "below its baseline" in caplog.text


# ---------------------------------------------------------------------------------------------------------
# GPU identity and CUDA_VISIBLE_DEVICES mapping


def gpu(index, bus, uuid, migs=()):
    return GpuInfo(index, uuid, bus, "NVIDIA H100 80GB HBM3", 81559.0, "550.54.15", tuple(migs))


# nvidia-smi's index order differs from PCI order here (NVML does not guarantee either).
G0 = gpu(0, "00000000:41:00.0", "GPU-11111111-aaaa-4000-8000-000000000000")
G1 = gpu(1, "00000000:07:00.0", "GPU-22222222-bbbb-4000-8000-000000000000", ["MIG-33333333-cccc"])
G2 = gpu(2, "00000000:0A:00.0", "GPU-22222299-dddd-4000-8000-000000000000")
INVENTORY = [G0, G1, G2]


@pytest.mark.parametrize(
    ("cvd", "expected"),
    [
        (None, [G1, G2, G0]),  # unset: every GPU, in CUDA (PCI bus) order
        ("", []),
        ("0", [G1]),  # CUDA ordinal 0 under PCI_BUS_ID = lowest bus id, which nvidia-smi calls index 1
        ("2,0", [G0, G1]),
        (" 1 , 2 ", [G2, G0]),
        ("1,-1,0", [G2]),  # CUDA stops at a negative ordinal
        ("-1", []),
        (G0.uuid, [G0]),
        (f"{G2.uuid},{G0.uuid}", [G2, G0]),
        ("GPU-11111111", [G0]),  # unique prefix, as CUDA accepts
        ("MIG-33333333-cccc", [G1]),  # MIG instance → its host GPU
        (f"MIG-{G1.uuid}/1/0", [G1]),  # pre-R470 MIG syntax
        ("GPU-11111111,1", [G0, G2]),
    ],
)
def test_resolve_visible_gpus(cvd, expected):
    assert resolve_visible_gpus(cvd, INVENTORY) == expected


@pytest.mark.parametrize(
    ("cvd", "message"),
    [
        ("3", "out of range"),
        ("GPU-2222", "matches several GPUs"),
        ("GPU-ffff", "matches no GPU"),
        ("MIG-99999999", "not a MIG instance"),
        (f"0,{G1.uuid}", "twice"),
    ],
)
def test_resolve_visible_gpus_rejects_bad_values(cvd, message):
    with pytest.raises(ValueError, match=message) as err:
        resolve_visible_gpus(cvd, INVENTORY)
    assert "CUDA_VISIBLE_DEVICES" in str(err.value)


def test_indices_need_pci_bus_order():
    with pytest.raises(ValueError, match="CUDA_DEVICE_ORDER=PCI_BUS_ID"):
        resolve_visible_gpus("0", INVENTORY, cuda_device_order="FASTEST_FIRST")
    # UUIDs do not depend on the order.
    assert resolve_visible_gpus(G0.uuid, INVENTORY, cuda_device_order="FASTEST_FIRST") == [G0]


@pytest.mark.parametrize(
    ("cvd", "order", "gpus", "slots"),
    [
        (None, None, [G1, G2, G0], [0, 1, 2]),  # unset: all of them, each under its PCI-order ordinal
        ("2,0", None, [G0, G1], [2, 0]),  # CUDA's default order on one GPU model ties to PCI order
        ("2,0", "FASTEST_FIRST", [G0, G1], [2, 0]),
        (f"{G0.uuid},1", "PCI_BUS_ID", [G0, G2], [2, 1]),  # a UUID becomes the ordinal children see
        ("MIG-33333333-cccc", None, [G1], ["MIG-33333333-cccc"]),  # no ordinal names a MIG instance
        ("1,-1,0", None, [G2], [1]),
        ("", None, [], []),
    ],
)
def test_usable_gpus_are_those_cuda_visible_devices_names(cvd, order, gpus, slots):
    assert usable_gpus(INVENTORY, cvd, order) == (gpus, slots)


def test_usable_gpus_refuse_ordinals_whose_order_nvidia_smi_cannot_tell():
    mixed = [G0, GpuInfo(1, "GPU-99", "00000000:07:00.0", "NVIDIA A100-SXM4-80GB", 81920.0, "550.54.15")]
    with pytest.raises(ValueError, match="CUDA_DEVICE_ORDER=PCI_BUS_ID"):
        usable_gpus(mixed, "0", None)  # fastest first on two models: not nvidia-smi's order
    assert usable_gpus(mixed, "0", "PCI_BUS_ID") == ([mixed[1]], [0])


def test_no_gpus_resolves_to_nothing():
    assert resolve_visible_gpus("0,1", []) == []


@pytest.fixture
def fake_path(monkeypatch):
    monkeypatch.setenv("PATH", f"{FAKES}{os.pathsep}{os.environ['PATH']}")


def test_query_gpus_reads_identity_and_mig(fake_path, monkeypatch):
    inventory = [
        {
            "index": 0,
            "uuid": "GPU-aaaa",
            "pci_bus_id": "00000000:41:00.0",
            "name": "NVIDIA A100-SXM4-80GB, rev 2",  # a comma in the name must not shift fields
            "memory_total": 81920,
            "driver": "535.104.05",
            "baseline_mib": 0,
            "power_w": 60.0,
            "util": 0,
            "mig": ["MIG-1111", "MIG-2222"],
        }
    ]
    monkeypatch.setenv("FAKE_NVIDIA_SMI_GPUS", json.dumps(inventory))
    assert query_gpus() == [
        GpuInfo(
            0,
            "GPU-aaaa",
            "00000000:41:00.0",
            "NVIDIA A100-SXM4-80GB, rev 2",
            81920.0,
            "535.104.05",
            ("MIG-1111", "MIG-2222"),
        )
    ]


def test_query_gpus_default_fake(fake_path):
    gpus = query_gpus()
    assert [(g.index, g.pci_bus_id, g.memory_total_mib, g.driver_version) for g in gpus] == [
        (0, "00000000:18:00.0", 81559.0, "550.54.15"),
        (1, "00000000:2A:00.0", 81559.0, "550.54.15"),
    ]


@pytest.mark.parametrize("mode", ["fail", "hang"])
def test_query_gpus_failure_is_a_warning(fake_path, monkeypatch, caplog, mode):
    monkeypatch.setenv("FAKE_NVIDIA_SMI_MODE", mode)
    with caplog.at_level(logging.WARNING):
        assert query_gpus(timeout_s=1.0) == []
    assert ("exit 9" if mode == "fail" else "hung") in caplog.text


def test_query_gpus_without_nvidia_smi(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("PATH", str(tmp_path))
    with caplog.at_level(logging.WARNING):
        assert query_gpus() == []
    assert "nvidia-smi not found" in caplog.text
