"""Local executor scheduling: disjoint slots, largest first, never oversubscribed, exclusive jobs alone."""

import random

import pytest

from tunebench.execution.scheduling import Job, Scheduler, SlotPool, overlaps


def simulate(jobs, slots, max_concurrent, durations):
    """Event-driven run of the scheduler; returns {key: (start, end, slots)}."""
    scheduler = Scheduler(jobs, SlotPool(list(range(slots))), max_concurrent)
    now, running, record = 0.0, {}, {}
    while not scheduler.done:
        for job in scheduler.next_ready():
            running[job.key] = now + durations[job.key]
            record[job.key] = (now, None, list(job.slots))
        key = min(running, key=running.get)
        now = running.pop(key)
        record[key] = (record[key][0], now, record[key][2])
        scheduler.finished(key)
    return record


def test_largest_first_then_fill_the_gaps_on_disjoint_slots():
    # two slots: the 2-slot job first, then the 1-slot jobs two at a time
    jobs = [Job(0, 1), Job(1, 1), Job(2, 2), Job(3, 1), Job(4, 1)]
    record = simulate(jobs, slots=2, max_concurrent=2, durations={k: 1.0 for k in range(5)})
    assert record[2][0] == 0.0 and record[2][2] == [0, 1]
    assert [record[k][0] for k in (0, 1, 3, 4)] == [1.0, 1.0, 2.0, 2.0]
    assert record[0][2] != record[1][2]  # side by side on different slots


@pytest.mark.parametrize("seed", range(20))
def test_never_oversubscribed_and_every_job_runs(seed):
    rng = random.Random(seed)
    slots = rng.choice([2, 4, 8])
    jobs = [Job(k, rng.choice([1, 1, 2, slots]), exclusive=rng.random() < 0.15) for k in range(12)]
    durations = {k: rng.uniform(0.5, 3.0) for k in range(12)}
    max_concurrent = rng.choice([1, 2, 3, 8])
    record = simulate(jobs, slots, max_concurrent, durations)
    assert sorted(record) == list(range(12))
    times = sorted({t for start, end, _ in record.values() for t in (start, end)})
    for t in times:
        live = [k for k, (s, e, _) in record.items() if s <= t < e]
        assert sum(jobs[k].size for k in live) <= slots and len(live) <= max_concurrent
        used = [slot for k in live for slot in record[k][2]]
        assert len(used) == len(set(used))  # disjoint slot sets
        if any(jobs[k].exclusive for k in live):
            assert len(live) == 1


def test_a_job_larger_than_the_machine_is_refused():
    with pytest.raises(ValueError, match="need more than the 2 slots"):
        Scheduler([Job(0, 4)], SlotPool([0, 1]))


def test_overlap_counts():
    intervals = {0: (0.0, 2.0), 1: (1.0, 3.0), 2: (2.0, 4.0), 3: (5.0, None)}
    assert [overlaps(intervals, k) for k in range(4)] == [1, 2, 1, 0]
