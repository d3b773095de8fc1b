"""The launch-queue replay of a scanned step: known answers (host-bound, GPU-bound, a host that a faster GPU
exposes, syncs, streams), the calibration against the timed step, and the measurement back on its own GPU."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tunebench.projection.host_replay import Timeline, calibrate, project_replay, replay

MS = 1e-3


def rows_of(events, step=1):
    """Kernel rows from (launch ms, duration ms, stream or None for a sync whose wait took `duration`)."""
    return [{"step": step, "class": "sync" if stream is None else "gemm", "launch_us": launch * 1e3,
             "dur_us": duration * 1e3, "stream": stream} for launch, duration, stream in events]


# ten kernels of 1.5 ms, launched 1 ms apart from 1 ms: the host is hidden behind the GPU
HIDDEN = rows_of([(1.0 + i, 1.5, "7") for i in range(10)])


def test_gpu_bound_host_bound_and_the_host_a_faster_gpu_exposes():
    timeline = Timeline.of(HIDDEN)
    assert timeline.host_gaps == pytest.approx((1 * MS,) + (1 * MS,) * 9)
    # as measured: the first launch at 1 ms, then kernel after kernel: 1 + 10 × 1.5
    assert replay(timeline, timeline.durations, 1.0) == pytest.approx(16 * MS)
    # kernels of 0.5 ms: the host is the bound, launching the last at 10 ms: 10 + 0.5 (an additive model that
    # scales the busy time and keeps the 1 ms of gap would say 1 + 10 × 0.5 = 6)
    assert replay(timeline, [0.5 * MS] * 10, 1.0) == pytest.approx(10.5 * MS)
    # a host twice as slow on the measured GPU: 20 + 1.5
    assert replay(timeline, timeline.durations, 2.0) == pytest.approx(21.5 * MS)
    # no host time at all: the kernels back to back
    assert replay(timeline, timeline.durations, 0.0) == pytest.approx(15 * MS)


def test_a_sync_waits_for_the_gpu_and_its_wait_is_not_host_work():
    # a 5 ms kernel at 0, a sync at 1 ms that waited 4 ms, a kernel launched 1 ms after the sync returned
    rows = rows_of([(0.0, 5.0, "7"), (1.0, 4.0, None), (6.0, 2.0, "7")])
    timeline = Timeline.of(rows)
    assert timeline.host_gaps == pytest.approx((0.0, 1 * MS, 1 * MS))
    assert replay(timeline, timeline.durations, 1.0) == pytest.approx(8 * MS)  # 5 (waited), +1, +2
    # a faster GPU: the sync returns when the 1 ms kernel is done, not when the profile's did
    assert replay(timeline, [1 * MS, 0.0, 2 * MS], 1.0) == pytest.approx(4 * MS)


def test_streams_run_side_by_side():
    rows = rows_of([(0.0, 4.0, "7"), (0.0, 3.0, "13"), (0.5, 1.0, "13")])
    timeline = Timeline.of(rows)
    assert replay(timeline, timeline.durations, 1.0) == pytest.approx(4 * MS)
    assert replay(timeline, [1 * MS, 3 * MS, 2 * MS], 1.0) == pytest.approx(5 * MS)


def test_the_elasticity_says_how_much_of_the_step_is_the_hosts():
    import math

    own = {id(r): r["dur_us"] * 1e-6 for r in HIDDEN}
    # measured (16 ms, host scale 1): a host 10 % slower delays only the first launch: 16 → 16.1 ms
    gpu_bound = project_replay(HIDDEN, own, 16 * MS)
    assert gpu_bound.host_elasticity == pytest.approx(math.log(16.1 / 16) / math.log(1.1))
    # on kernels of 0.5 ms the host bounds the step: 10.5 → 11.5 ms
    host_bound = project_replay(HIDDEN, {id(r): 0.5 * MS for r in HIDDEN}, 16 * MS)
    assert host_bound.host_elasticity == pytest.approx(math.log(11.5 / 10.5) / math.log(1.1))
    assert project_replay(HIDDEN, own, 14 * MS).host_elasticity == 0.0  # kernel-bound


def test_the_calibrated_host_scale_reproduces_the_timed_step():
    timeline = Timeline.of(HIDDEN)
    assert calibrate(timeline, 21.5 * MS) == pytest.approx(2.0)
    assert calibrate(timeline, 14 * MS) is None  # the kernels alone take 15 ms: nothing to calibrate
    # kernel-bound: the step scales with the kernels' replay (15 → 7.5 ms of kernels: 14 → 7)
    halved = {id(r): 0.75 * MS for r in HIDDEN}
    out = project_replay(HIDDEN, halved, 14 * MS)
    assert out.step_time == pytest.approx(7 * MS) and out.host_scales == ("kernel-bound",)
    # the same host twice as slow on the target (host_ratio 2) doubles every host gap
    assert project_replay(HIDDEN, {id(r): 0.5 * MS for r in HIDDEN}, 16 * MS, 2.0).step_time == pytest.approx(
        20.5 * MS)
    # every launch at once (no host time between them): the rest of the timed step is a host tail, kept
    at_once = rows_of([(0.0, 1.0, "7"), (0.0, 1.0, "7")])
    out = project_replay(at_once, {id(r): 0.5 * MS for r in at_once}, 3 * MS, 1.5)
    assert out.step_time == pytest.approx((1 + 1 * 1.5) * MS) and out.host_scales == ("host tail",)


EVENTS = st.lists(st.tuples(st.floats(0, 5), st.floats(0.001, 5), st.sampled_from(["7", "7", "13", None])),
                  min_size=1, max_size=30)


@given(events=EVENTS, stretch=st.floats(1.0001, 4.0), steps=st.integers(1, 3))
@settings(max_examples=150, deadline=None)
def test_any_step_projected_onto_its_own_gpu_returns_its_measurement(events, stretch, steps):
    clock, placed = 0.0, []
    for gap, duration, stream in events:
        clock += gap
        placed.append((clock, duration, stream))
    rows = [r for s in range(1, steps + 1) for r in rows_of(placed, step=s)]
    timeline = Timeline.of(rows_of(placed))
    floor = replay(timeline, timeline.durations, 0.0)
    measured = max(floor * stretch, 1e-6)
    own = {id(r): r["dur_us"] * 1e-6 for r in rows if r["class"] != "sync"}
    out = project_replay(rows, own, measured)
    assert out.step_time == pytest.approx(measured, rel=1e-6)
    # the replay never shrinks as the host slows
    assert replay(timeline, timeline.durations, 1.0) <= replay(timeline, timeline.durations, 1.5) + 1e-15
