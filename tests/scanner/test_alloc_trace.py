"""The allocator-history replay behind the scanner's CUDA peak attribution, on hand-made histories."""

from scanner.alloc_trace import activations_of, replay, resolve_phases, step_peak

K = 512  # sizes below are in whole allocator blocks, except where rounding is the point


def alloc(blocks, tag):
    return {"action": "alloc", "size": blocks * K, "user_metadata": str(tag)}


def free(blocks, tag):
    return {"action": "free_requested", "size": blocks * K, "user_metadata": str(tag)}


def state(phase, saved, grads=0, opt=0, rc=(None, None), claims=False):
    return (phase, saved * K, grads, opt, rc[0], rc[1], claims)


def test_history_sizes_are_counted_as_whole_512_byte_blocks_like_allocated_bytes():
    raw = [{"action": "alloc", "size": n, "user_metadata": "0"} for n in (1, 513)]
    rep = replay(raw + [{"action": "free_requested", "size": 1, "user_metadata": "1"}], 0, 0, 1)
    assert rep.interval_peak[0] == 512 + 1024
    assert rep.start_allocated[1] == 1536 and rep.interval_peak[1] == 1536


def test_replay_running_total_peaks_and_start_values():
    entries = [
        alloc(100, 0),
        alloc(50, 0),
        free(100, 0),
        alloc(30, 2),
        {"action": "segment_alloc", "size": 9},
    ]
    rep = replay(entries, allocated_at_start=1000 * K, first_tag=0, last_tag=3)
    assert rep.start_allocated == {0: 1000 * K, 1: 1050 * K, 2: 1050 * K, 3: 1080 * K}
    assert rep.interval_peak == {0: 1150 * K, 1: 1050 * K, 2: 1080 * K, 3: 1080 * K}
    assert rep.entries == 4 and rep.stale == 0 and rep.before_start == 0


def test_entries_before_the_first_tag_are_already_in_the_start_value():
    entries = [{"action": "alloc", "size": 5 * K, "user_metadata": ""}, alloc(10, 0), alloc(1, 1)]
    rep = replay(entries, 100 * K, 0, 1)
    assert rep.before_start == 1 and rep.stale == 0
    assert rep.start_allocated == {0: 100 * K, 1: 110 * K} and rep.interval_peak[1] == 111 * K


def test_stale_thread_entries_belong_to_the_state_before_the_next_fresh_tag():
    # Tags 1-3 were set on autograd's thread (backward); tag 3 (backward end) saw no allocation there. The main
    # thread then clips with its old tag 0 still set, before tagging 4 (optimizer start): those 70 blocks
    # happened under state 3, and the interval peak is 3's, not 0's.
    entries = [alloc(10, 0), alloc(20, 1), free(20, 2), alloc(70, 0), free(70, 0), alloc(5, 4)]
    rep = replay(entries, 0, 0, 4)
    assert rep.stale == 2 and rep.entries == 4
    assert rep.start_allocated == {0: 0, 1: 10 * K, 2: 30 * K, 3: 10 * K, 4: 10 * K}
    assert rep.interval_peak == {0: 10 * K, 1: 30 * K, 2: 30 * K, 3: 80 * K, 4: 15 * K}


def test_another_scans_tag_is_stale_and_trailing_stale_entries_go_to_the_last_state():
    def ours(e):
        return {**e, "user_metadata": "scan1:" + e["user_metadata"]}

    old = {
        "action": "alloc",
        "size": 40 * K,
        "user_metadata": "scan0:7",
    }  # a thread tagged by an earlier scan
    assert replay([old, alloc(1, 0)], 0, 0, 1, prefix="scan1:").before_start == 2  # no tag of ours yet
    entries = [ours(alloc(1, 0)), old, ours(alloc(2, 1)), old]
    rep = replay(entries, 0, 0, 2, prefix="scan1:")
    # +1 under 0; the first stale +40 is held until tag 1 appears, so it belongs to state 0; +2 under 1; the
    # last stale +40 has no fresh tag after it: it belongs to the last state, 2.
    assert rep.stale == 2 and rep.entries == 2
    assert rep.interval_peak == {0: 41 * K, 1: 43 * K, 2: 83 * K}
    assert rep.start_allocated == {0: 0, 1: 41 * K, 2: 43 * K}


def test_saved_tensor_allocated_before_its_pack_counts_as_activation_at_the_peak():
    # tag 0: forward starts; an output is allocated, then saved (tag 1 claims the interval before it);
    # tag 2: the step ends after the output is freed.
    states = [state("forward", 0), state("forward", 400, claims=True), state("other", 0)]
    rep = replay([alloc(400, 0), free(400, 1)], 0, 0, 2)
    sp = step_peak(states, resolve_phases(states, "ab", "clip", "optimizer", "other"), rep, 0, 2)
    assert (sp.peak, sp.activations, sp.phase) == (400 * K, 400 * K, "forward")


def test_released_saved_tensor_is_still_an_activation_until_freed():
    # tag 0: backward with 400 saved; a 100 temporary is allocated; tag 1: the saved tensor is released (its
    # storage is freed right after, in tag 1's interval). The peak (500) happened under tag 0.
    states = [state("backward", 400), state("backward", 0), state("other", 0)]
    entries = [alloc(100, 0), free(400, 1), free(100, 1)]
    sp = step_peak(states, ["backward", "backward", "other"], replay(entries, 400 * K, 0, 2), 0, 2)
    assert (sp.peak, sp.activations, sp.owner) == (500 * K, 400 * K, 0)
    assert sp.phase_peaks == {"backward": 500 * K}


def test_recomputed_activations_are_the_allocator_delta_since_the_layer_recompute_began():
    # tag 0 backward; tag 1 = recompute of a layer begins (base); 300 recomputed; tag 2 = its child ended
    # (upto); a 50 temporary on top is the peak.
    states = [
        state("backward", 0),
        state("backward", 0, rc=(1, None), claims=True),
        state("backward", 0, rc=(1, 2), claims=True),
        state("other", 0),
    ]
    entries = [alloc(300, 1), alloc(50, 2), free(50, 2), free(300, 2)]
    rep = replay(entries, 1000 * K, 0, 3)
    sp = step_peak(states, ["backward"] * 3 + ["other"], rep, 0, 3)
    assert activations_of(states[2], rep.start_allocated) == 300 * K
    assert (sp.peak, sp.activations) == (1350 * K, 300 * K)


def test_after_backward_interval_is_named_by_what_follows():
    states = [
        state(p, 0) for p in ("backward", "ab", "ab", "forward", "backward", "ab", "optimizer", "other")
    ]
    phases = resolve_phases(states, "ab", "clip", "optimizer", "other")
    assert phases == ["backward", "other", "other", "forward", "backward", "clip", "optimizer", "other"]
