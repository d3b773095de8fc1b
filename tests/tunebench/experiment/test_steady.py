"""Steady-state statistics, step windows, the step timer's auto stop and the throughput columns (issue F)."""

import statistics
from types import SimpleNamespace

import pytest
import torch

from tunebench.experiment.steady import (
    SteadyPolicy,
    median_ci_pct,
    median_is_known,
    median_rank_interval,
    percentile,
    summarize,
)
from tunebench.experiment.step_timer import StepTimer
from tunebench.experiment.windows import plan_windows
from tunebench.telemetry.steady_energy import steady_window


def test_median_rank_interval_matches_the_binomial_tables():
    # Published distribution-free 95 % intervals for the median (e.g. Conover, Practical Nonparametric
    # Statistics, table A3): n=10 → ranks 2..9, n=20 → 6..15, n=25 → 8..18, n=100 → 40..61.
    assert median_rank_interval(5) is None and median_rank_interval(6) == (1, 6)
    assert median_rank_interval(10) == (2, 9) and median_rank_interval(20) == (6, 15)
    assert median_rank_interval(25) == (8, 18) and median_rank_interval(100) == (40, 61)


def _tail_times_2_pow_n(n: int, m: int) -> int:
    """2**n · P(B < m) for B ~ Binomial(n, 1/2), in exact integers (independent of the implementation)."""
    coefficient, total = 1, 0
    for i in range(m):
        total += coefficient
        coefficient = coefficient * (n - i) // (i + 1)
    return total


@pytest.mark.parametrize("n", [1, 5, 6, 7, 100, 1023, 1024, 1075, 1999, 2000, 2001, 2500, 5000, 20_000])
def test_median_rank_interval_is_exact_at_any_length(n):
    # The defining property, checked in exact rationals: P(B < j) <= 2.5 % < P(B < j + 1). Up to 1023 the old
    # float sum worked; from 1024 it overflowed (issue J). scipy's binomial answers at every length now.
    from fractions import Fraction

    ranks = median_rank_interval(n)
    if n < 6:
        assert ranks is None
        return
    j, k = ranks
    assert k == n + 1 - j
    alpha = Fraction(0.025)
    assert Fraction(_tail_times_2_pow_n(n, j), 2**n) <= alpha < Fraction(_tail_times_2_pow_n(n, j + 1), 2**n)


@pytest.mark.parametrize("n", [10**5, 10**6])
def test_median_statistics_of_a_million_steps(n):
    import math
    import random
    import time

    started = time.monotonic()
    j, k = median_rank_interval(n)
    # Normal approximation of the binomial quantile: n/2 - 1.96·sqrt(n)/2, within one rank.
    assert abs(j - (n / 2 - 1.959964 * math.sqrt(n) / 2)) <= 1 and k == n + 1 - j
    rng = random.Random(n)
    times = [1.0 + rng.random() * 1e-3 for _ in range(n)]
    summary = summarize([9.0] * 5 + times, SteadyPolicy(warmup_steps=5))
    assert summary.count == n and summary.ci_pct is not None and 0 < summary.ci_pct < 0.01
    assert time.monotonic() - started < 30


def test_summary_of_a_synthetic_series_is_exact():
    warmup = [5.0, 3.0, 2.0]  # slow first steps that must not count
    steady = [1.00, 1.02, 0.98, 1.01, 0.99, 1.03, 0.97, 1.00, 1.01, 0.99]
    s = summarize(warmup + steady, SteadyPolicy(warmup_steps=3, min_steps=10))
    assert s.steps == list(range(4, 14)) and s.count == 10
    assert s.median == 1.0
    assert s.p10 == pytest.approx(0.979) and s.p90 == pytest.approx(1.021)  # numpy's linear method
    assert s.p10 == pytest.approx(percentile(steady, 10))
    assert s.cv == pytest.approx(statistics.stdev(steady) / statistics.fmean(steady))
    ordered = sorted(steady)  # n = 10: the interval is the 2nd and 9th order statistics
    assert s.ci_pct == pytest.approx(100 * max(1.0 - ordered[1], ordered[8] - 1.0))
    assert s.warnings == []


def test_exclusions_and_warnings():
    times = [9.0] * 5 + [1.0, 50.0, 1.0, 1.1, 0.9, 1.0]
    s = summarize(times, SteadyPolicy(warmup_steps=5, min_steps=10), excluded={7})
    assert s.steps == [6, 8, 9, 10, 11] and s.median == 1.0  # step 7 (a scanned step) is left out
    assert any("only 5 steady step(s)" in w for w in s.warnings)
    noisy = summarize([1.0] * 5 + [1.0, 2.0] * 6, SteadyPolicy(warmup_steps=5, min_steps=10, max_cv=0.05))
    assert any("robust CV" in w and "exceeds 5 %" in w for w in noisy.warnings)
    assert summarize([1.0, 1.0], SteadyPolicy(warmup_steps=5)).warnings[0].startswith("no steady steps")


def test_one_slow_step_does_not_make_a_run_unsteady():
    # Issue L's case: 24 steps at 0.26-0.30 s and one at 0.585 s read CV 21.7 %, yet the median is known well.
    normal = statistics.NormalDist(0.28, 0.01)
    steady = [normal.inv_cdf((i + 0.5) / 24) for i in range(24)] + [0.585]  # 0.26-0.30 s, then one slow step
    s = summarize([1.0] * 5 + steady, SteadyPolicy(warmup_steps=5, min_steps=10, max_cv=0.05))
    assert s.cv > 0.15 and s.robust_cv < 0.05 and s.warnings == []
    spread = [0.2, 0.3] * 12 + [0.25]  # half the steps 50 % slower than the other half: unsteady, warned
    assert summarize([1.0] * 5 + spread, SteadyPolicy(warmup_steps=5, max_cv=0.05)).warnings


def test_median_is_known_needs_enough_steps_and_a_tight_interval():
    policy = SteadyPolicy(warmup_steps=0, min_steps=10, target_ci_pct=1.0)
    assert not median_is_known([1.0] * 9, policy)
    assert median_is_known([1.0, 1.001, 0.999, 1.002, 0.998] * 2, policy)
    assert not median_is_known([1.0, 1.1, 0.9, 1.2, 0.8] * 2, policy)
    assert median_ci_pct([1.0, 1.1, 0.9, 1.2, 0.8] * 2) > 1.0


def test_step_windows_put_the_memory_scan_inside_the_warm_up():
    w = plan_windows(5, 30)
    assert w.memory == (4, 4) and w.timed == (6, 30) and not w.excluded
    assert (w.scan_steps, w.time_steps) == ("4", "6-30")
    assert plan_windows(5, 8).timed == (6, 8) and plan_windows(5, 5).timed is None
    # auto mode may stop once the memory scan (step 4) and the step absorbing its end are done: the automatic
    # phase-timed window is every steady step so far, an explicit one is waited for
    assert w.earliest_stop == 5 and plan_windows(5, 30, time_steps="12-20").earliest_stop == 20
    assert plan_windows(5, 30, scanning=False).earliest_stop == 0
    user = plan_windows(5, 30, scan_steps="10")
    assert user.excluded == {10, 11} and user.timed == (12, 30)
    assert plan_windows(5, 30, scanning=False) .memory is None
    with pytest.raises(ValueError, match="ends after max_steps"):
        plan_windows(5, 3, scan_steps="5")
    with pytest.raises(ValueError, match="overlaps"):
        plan_windows(5, 30, scan_steps="6", time_steps="5-8")


class ScriptedClock:
    """perf_counter stand-in: each call returns the next boundary of a scripted series of step times."""

    def __init__(self, step_times):
        self.bounds = [0.0]
        for t in step_times:
            self.bounds.append(self.bounds[-1] + t)
        self.calls = 0

    def __call__(self):
        value = self.bounds[min(self.calls, len(self.bounds) - 1)]
        self.calls += 1
        return value


def drive(timer: StepTimer, max_steps: int) -> int:
    """The Trainer's calls to the timer; returns the step at which training stopped."""
    state, control = SimpleNamespace(global_step=0, max_steps=max_steps), SimpleNamespace(should_training_stop=False)
    timer.on_train_begin(None, state, control)
    for step in range(1, max_steps + 1):
        state.global_step = step
        timer.on_step_end(None, state, control)
        if control.should_training_stop:
            return step
    return max_steps


def test_auto_mode_stops_once_the_median_is_known_and_otherwise_at_the_bound():
    policy = SteadyPolicy(warmup_steps=2, min_steps=10, target_ci_pct=1.0)
    stable = [3.0, 2.0] + [1.0, 1.002, 0.998, 1.001, 0.999] * 20
    timer = StepTimer(torch.device("cpu"), policy, auto=True, host_clock=ScriptedClock(stable))
    assert drive(timer, 100) == 12  # 2 warm-up + the 10 steady steps the policy asks for at least
    assert timer.stopped_early
    assert [round(s.seconds, 6) for s in timer.finish()][:4] == [3.0, 2.0, 1.0, 1.002]
    noisy = [3.0, 2.0] + [1.0, 1.3, 0.7, 1.5, 0.5] * 20
    timer = StepTimer(torch.device("cpu"), policy, auto=True, host_clock=ScriptedClock(noisy))
    assert drive(timer, 40) == 40 and not timer.stopped_early  # never known to ±1 %: runs to max_steps
    late = StepTimer(torch.device("cpu"), policy, auto=True, earliest_stop=20, host_clock=ScriptedClock(stable))
    assert drive(late, 100) == 20  # never before the scanner's memory scan (and an explicit timed window) is done


def test_fixed_mode_times_every_step_and_anchors_wall_clock():
    series = [0.5, 0.25, 0.25, 0.125]
    timer = StepTimer(torch.device("cpu"), SteadyPolicy(warmup_steps=1), host_clock=ScriptedClock(series))
    assert drive(timer, 4) == 4
    steps = timer.finish()
    assert [s.seconds for s in steps] == series
    ends = [s.end_unix for s in steps]
    assert ends == sorted(ends) and ends[1] - ends[0] == pytest.approx(0.25)


def test_steady_window_for_energy_spans_the_steady_steps():
    steps = [{"step": i, "seconds": 1.0, "end_unix": 100.0 + i, "steady": i >= 3, "nonpad_tokens": 10 * i}
             for i in range(1, 6)]
    steps[3]["steady"] = False  # an excluded step inside the span still belongs to the window's energy
    assert steady_window(steps) == (102.0, 105.0, 30 + 40 + 50)
    assert steady_window([{**s, "steady": False} for s in steps]) is None


def _tiny_model(checkpointing=False):
    from tunebench.experiment.models import load_model

    model = load_model("preset:llama-tiny", "float32")
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model


def test_steady_columns_from_step_times_and_tokens():
    from tunebench.experiment.flops import checkpointed_layers, recompute_flops, training_flops
    from tunebench.experiment.step_timer import StepTime
    from tunebench.experiment.throughput import steady_columns

    model = _tiny_model(checkpointing=True)
    times = [2.0, 1.5] + [0.5, 0.6, 0.4, 0.5, 0.5]
    steps = [StepTime(i + 1, t, 1000.0 + i) for i, t in enumerate(times)]
    tokens = [{"padded_tokens": 128, "nonpad_tokens": 100 + 2 * i, "sum_squared_lengths": 5000, "sequences": 2}
              for i in range(len(times))]
    row = steady_columns(steps, tokens, model, world=2, device_name="NVIDIA H100 80GB HBM3",
                         policy=SteadyPolicy(warmup_steps=2, min_steps=5), excluded=set())
    nonpad = statistics.fmean(100 + 2 * i for i in range(2, 7))  # steps 3..7
    assert row["steady_steps"] == 5 and row["steady_step_time_median"] == 0.5 and row["first_step_seconds"] == 2.0
    assert row["steady_tokens_per_second"] == pytest.approx(128 / 0.5)
    assert row["steady_nonpad_tokens_per_second"] == pytest.approx(nonpad / 0.5)
    assert row["steady_nonpad_tokens_per_second_per_device"] == pytest.approx(nonpad / 0.5 / 2)
    assert row["steady_padding_fraction"] == pytest.approx(1 - nonpad / 128)
    model_flops = training_flops(model, nonpad, 5000)
    assert row["steady_mfu"] == pytest.approx(model_flops / 0.5 / (989.4e12 * 2))
    assert len(checkpointed_layers(model)) == 2  # llama-tiny's two decoder layers
    assert row["steady_hfu"] == pytest.approx(
        (model_flops + recompute_flops(model, nonpad, 5000)) / 0.5 / (989.4e12 * 2)
    )
    assert row["steady_hfu"] > row["steady_mfu"]
    # CV 14.1 %, but three of the five steps are at the median: the robust spread is 0 and nothing is warned
    assert row["steady_step_time_cv"] == pytest.approx(0.1414, abs=1e-4) and row["steady_step_time_robust_cv"] == 0
    assert row["measurement_warning"] == ""
    assert steady_columns(steps, tokens, _tiny_model(), 1, None, SteadyPolicy(warmup_steps=2, min_steps=5),
                          set())["steady_mfu"] is None  # CPU: no peak FLOP/s


def test_recompute_flops_are_the_checkpointed_layers_forward_again():
    from tunebench.experiment.flops import recompute_flops

    model = _tiny_model(checkpointing=True)
    layer_params = sum(p.numel() for layer in model.model.layers for p in layer.parameters())
    width = model.config.num_attention_heads * (model.config.hidden_size // model.config.num_attention_heads)
    assert recompute_flops(model, 1000, 7000) == 2 * layer_params * 1000 + 4 * 2 * width * 7000
    assert recompute_flops(_tiny_model(), 1000, 7000) == 0.0


def test_token_counter_closes_one_entry_per_step():
    from tunebench.experiment.tokens import TokenCounter, totals

    model = _tiny_model()
    counter = TokenCounter()
    counter.attach(model)
    model.train()
    ids = torch.randint(3, 200, (2, 8))
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, 5:] = 0
    for _ in range(2):  # two micro-batches in step 1
        model(input_ids=ids, attention_mask=mask)
    counter.end_step()
    counter.end_step()  # a step with no forward (e.g. a skipped batch) counts zeros
    model(input_ids=ids)
    counter.end_step()
    steps = counter.per_step()
    assert steps[0] == {"padded_tokens": 32, "nonpad_tokens": 26, "sum_squared_lengths": 2 * (64 + 25), "sequences": 4}
    assert steps[1] == dict.fromkeys(steps[0], 0)
    assert steps[2] == {"padded_tokens": 16, "nonpad_tokens": 16, "sum_squared_lengths": 2 * 64, "sequences": 2}
    assert totals(steps)["padded_tokens"] == 48


def test_moe_recompute_counts_the_routed_experts_like_the_model_flops():
    # Issue L: HFU 53.9 % against MFU 19.4 % on a mixture of experts, because the recompute counted every expert.
    from transformers import AutoConfig, AutoModelForCausalLM

    from tunebench.experiment.flops import (
        checkpointed_layers,
        matmul_parameter_counts,
        recompute_flops,
        training_flops,
        utilisation_problem,
    )

    config = AutoConfig.for_model("mixtral", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                                  num_experts_per_tok=2, vocab_size=512, tie_word_embeddings=False)
    model = AutoModelForCausalLM.from_config(config)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    layers = checkpointed_layers(model)
    experts = sum(p.numel() for layer in layers for n, p in layer.named_parameters() if ".experts." in f".{n}")
    others = sum(p.numel() for layer in layers for n, p in layer.named_parameters() if ".experts." not in f".{n}")
    assert experts > 0 and others > 0
    tokens, squares = 1000, 50_000
    width = config.num_attention_heads * (config.hidden_size // config.num_attention_heads)
    assert recompute_flops(model, tokens, squares) == 2 * (others + experts * 2 / 4) * tokens + 4 * 2 * width * squares
    total, _ = matmul_parameter_counts(model)
    head, norm = model.lm_head.weight.numel(), model.model.norm.weight.numel()
    assert total == others + experts // 2 + head + norm  # the model FLOPs' count, routed the same way
    model_flops = training_flops(model, tokens, squares)
    assert (model_flops + recompute_flops(model, tokens, squares)) / model_flops <= 1.5
    assert utilisation_problem(0.194, 0.539) and utilisation_problem(0.3, 1.2) and utilisation_problem(0.4, 0.3)
    assert utilisation_problem(0.30, 0.38) is None
