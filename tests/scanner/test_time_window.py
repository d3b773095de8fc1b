"""Phase times add up, gradient accumulation and token counting, no hooks left behind.

Reached through the modules it calls (the phase marks and their clock): scanner/phases.py, scanner/clock.py."""

import math

import pytest
import torch
from transformers import TrainerCallback

from scanner import Scanner
from tests.fixtures.scanner import lm_dataset, no_hooks_left, tiny_llama, train


def test_phases_sum_to_step_time_and_ga_counts():
    sc = Scanner(steps="2-3", output=None, log_to_trainer=False)
    train(
        tiny_llama(), sc, dataset=lm_dataset(seq=16, pad_last=4), gradient_accumulation_steps=3, max_steps=4
    )
    assert [s.step for s in sc.report.steps] == [2, 3]
    for r in sc.report.steps:
        phases = [r.time_forward, r.time_backward, r.time_clip, r.time_optimizer, r.time_other]
        assert all(p >= 0 for p in phases), phases
        assert math.isclose(sum(phases), r.time_step, rel_tol=1e-12, abs_tol=1e-12)
        assert r.micro_batches == 3
        assert r.tokens == 3 * 2 * 16  # GA x batch x seq, all micro-batches
        assert r.nonpad_tokens == 3 * 2 * 12  # attention_mask sum
        assert r.tokens_per_second == pytest.approx(r.tokens / r.time_step)
    s = sc.report.summary()
    assert s["time_step_min"] <= s["time_step"] <= s["time_step_max"]


def test_padding_free_batches_count_every_token():
    sc = Scanner(steps=1, output=None, log_to_trainer=False)
    train(tiny_llama(), sc, dataset=lm_dataset(seq=16, with_mask=False), max_steps=1)
    r = sc.report.steps[0]
    assert r.tokens == r.nonpad_tokens == 2 * 16


def test_step_numbering_is_global_step():
    seen = []

    class Spy(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            seen.append(state.global_step)

    sc = Scanner(steps=4, output=None, log_to_trainer=False)
    from tests.fixtures.scanner import Trainer, TrainingArguments

    t = Trainer(
        model=tiny_llama(),
        args=TrainingArguments(
            "/tmp/scanner-tests",
            max_steps=5,
            use_cpu=True,
            report_to=[],
            save_strategy="no",
            per_device_train_batch_size=2,
            disable_tqdm=True,
            logging_strategy="no",
        ),
        train_dataset=lm_dataset(),
        callbacks=[sc, Spy()],
    )
    t.train()
    assert seen == [1, 2, 3, 4, 5] and sc.report.steps[0].step == 4


def test_hooks_removed_after_scan():
    model = tiny_llama()
    during = []

    class Check(TrainerCallback):  # runs after the Scanner armed itself for step 2
        def on_step_begin(self, args, state, control, model=None, optimizer=None, **kw):
            during.append(no_hooks_left(model, optimizer))

    sc = Scanner(steps=2, output=None, log_to_trainer=False)
    trainer = train(model, sc, max_steps=3, gradient_checkpointing=True)
    trainer_check = train(tiny_llama(), Scanner(steps=2, output=None, log_to_trainer=False), max_steps=3)
    del trainer_check
    assert sc.report is not None
    model2 = tiny_llama()
    sc2 = Scanner(steps=2, output=None, log_to_trainer=False)
    from tests.fixtures.scanner import Trainer, TrainingArguments

    Trainer(
        model=model2,
        args=TrainingArguments(
            "/tmp/scanner-tests",
            max_steps=3,
            use_cpu=True,
            report_to=[],
            save_strategy="no",
            per_device_train_batch_size=2,
            disable_tqdm=True,
            logging_strategy="no",
        ),
        train_dataset=lm_dataset(),
        callbacks=[sc2, Check()],
    ).train()
    assert during == [True, False, True]  # hooks exist only around step 2 (the checker can see them)
    assert no_hooks_left(model, trainer.optimizer)


def test_hooks_removed_when_training_raises_mid_scan():
    model = tiny_llama()
    calls = {"n": 0}

    def boom(module, args):
        calls["n"] += 1
        if calls["n"] == 2:  # the second forward = step 2, the scanned one
            raise RuntimeError("injected failure")

    model.model.layers[1].mlp.register_forward_pre_hook(boom)
    sc = Scanner(steps=2, output=None, log_to_trainer=False)
    from tests.fixtures.scanner import Trainer, TrainingArguments

    trainer = Trainer(
        model=model,
        args=TrainingArguments(
            "/tmp/scanner-tests",
            max_steps=3,
            use_cpu=True,
            report_to=[],
            save_strategy="no",
            per_device_train_batch_size=2,
            disable_tqdm=True,
            logging_strategy="no",
        ),
        train_dataset=lm_dataset(),
        callbacks=[sc],
    )
    with pytest.raises(RuntimeError, match="injected failure"):
        trainer.train()
    model.model.layers[1].mlp._forward_pre_hooks.clear()  # the test's own hook
    assert sc.report is None
    assert no_hooks_left(model, trainer.optimizer)
    # the saved-tensor hooks were popped too: a plain forward/backward afterwards is untouched
    out = model(input_ids=torch.randint(0, 256, (1, 8)), labels=torch.randint(0, 256, (1, 8)))
    out.loss.backward()


def _hook_census(model, optimizer) -> dict[str, int]:
    """How many scanner hooks of each kind are installed right now."""
    from tests.fixtures.scanner import _is_scanner_hook

    def count(dicts):
        return sum(1 for d in dicts for fn in d.values() if _is_scanner_hook(fn))

    opt = optimizer
    while hasattr(opt, "optimizer"):
        opt = opt.optimizer
    return {
        "model": count([model._forward_pre_hooks, model._forward_hooks]),
        "params": count([getattr(p, "_post_accumulate_grad_hooks", None) or {} for p in model.parameters()]),
        "optimizer": count([opt._optimizer_step_pre_hooks, opt._optimizer_step_post_hooks]),
    }


def test_time_window_steps_carry_phase_hooks_only_and_report_their_median_step():
    census = {}

    class Census(TrainerCallback):
        def on_step_begin(self, args, state, control, model=None, optimizer=None, **kw):
            census[state.global_step + 1] = _hook_census(model, optimizer)

    sc = Scanner(steps=2, time_steps="4-6", output=None, log_to_trainer=False)
    from tests.fixtures.scanner import Trainer, TrainingArguments

    Trainer(model=tiny_llama(), args=TrainingArguments("/tmp/scanner-tests", max_steps=7, use_cpu=True, report_to=[],
                                                       save_strategy="no", per_device_train_batch_size=2,
                                                       disable_tqdm=True, logging_strategy="no"),
            train_dataset=lm_dataset(seq=16, pad_last=4), callbacks=[sc, Census()]).train()
    # memory step: per-parameter gradient hooks; timed steps: only the model's and the optimizer's phase hooks
    assert census[2]["params"] > 0 and census[2]["model"] == 2 and census[2]["optimizer"] == 2
    for step in (4, 5, 6):
        assert census[step] == {"model": 2, "params": 0, "optimizer": 2}, (step, census[step])
    for step in (1, 3, 7):
        assert census[step] == {"model": 0, "params": 0, "optimizer": 0}, (step, census[step])

    report = sc.report
    assert [s.step for s in report.steps] == [2] and [s.step for s in report.time_steps] == [4, 5, 6]
    times = sorted(report.time_steps, key=lambda s: s.time_step)
    chosen = times[1]  # the median of three
    flat = sc.flat_metrics()
    assert flat["scan_time_source"] == "time_window" and flat["scan_time_window"] == "4-6"
    assert flat["scan_time_step_chosen"] == chosen.step and flat["scan_time_step"] == chosen.time_step
    assert flat["scan_time_step_min"] == times[0].time_step and flat["scan_time_step_max"] == times[2].time_step
    assert flat["scan_memory_step_time"] == report.steps[0].time_step
    for step in report.time_steps:
        phases = [step.time_forward, step.time_backward, step.time_clip, step.time_optimizer, step.time_other]
        assert min(phases) >= 0 and math.isclose(sum(phases), step.time_step, rel_tol=1e-12, abs_tol=1e-12)
        assert step.tokens == 2 * 16 and step.nonpad_tokens == 2 * 12 and step.micro_batches == 1
    assert flat["scan_tokens"] == 32 and flat["scan_nonpad_tokens_per_second"] == pytest.approx(24 / chosen.time_step)
    assert flat["scan_mem_params"] == report.steps[0].mem_params  # memory still from the memory step


def test_auto_time_window_follows_the_memory_step_and_falls_back_when_training_is_too_short():
    sc = Scanner(steps=2, output=None, log_to_trainer=False)  # time_steps="auto": 4-8
    train(tiny_llama(), sc, max_steps=9)
    assert [s.step for s in sc.report.time_steps] == [4, 5, 6, 7, 8]
    assert sc.flat_metrics()["scan_time_window"] == "4-8"
    short = Scanner(steps=2, output=None, log_to_trainer=False)
    train(tiny_llama(), short, max_steps=6)  # the window is cut at the end of training: 4-6
    assert [s.step for s in short.report.time_steps] == [4, 5, 6]
    none = Scanner(steps=2, output=None, log_to_trainer=False)
    train(tiny_llama(), none, max_steps=3)  # no room for a window: times from the memory step, said so
    flat = none.flat_metrics()
    assert flat["scan_time_source"] == "memory_steps" and flat["scan_time_window"] is None
    assert flat["scan_time_step"] == none.report.steps[0].time_step


def test_time_steps_must_not_overlap_the_memory_steps():
    with pytest.raises(ValueError, match="overlaps the memory-scanned steps"):
        Scanner(steps="4-6", time_steps="6-9")
    assert Scanner(steps=3, time_steps="off").options.time_window is None


@pytest.mark.parametrize("attn, expected", [("sdpa", "flash"), ("eager", "none")])
def test_attention_backend_is_read_from_the_operators_that_ran(attn, expected):
    sc = Scanner(steps=2, output=None, log_to_trainer=False, time_steps="off")
    train(tiny_llama(attn_implementation=attn), sc, dataset=lm_dataset(seq=16), max_steps=2)
    flat = sc.flat_metrics()
    assert flat["scan_attention_backend"] == expected
    assert flat["scan_attention_calls"] == (2 if expected != "none" else 0)  # one call per layer, 2 layers


def test_backward_starts_at_whichever_output_gets_a_gradient_first():
    """A loss built outside the model from another output (TRL's fused head returns log-probabilities) must
    still be timed as backward, not as 'other'."""
    from tests.fixtures.scanner import Trainer

    class OutsideLoss(Trainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            out = model(**inputs)  # out.loss exists and requires grad, like TRL's fused output ...
            return out.logits.float().logsumexp(-1).mean()  # ... but the loss used is built from another output

    sc = Scanner(steps=2, time_steps="4-5", output=None, log_to_trainer=False)
    train(tiny_llama(), sc, trainer_cls=OutsideLoss, max_steps=5)
    assert [s.step for s in sc.report.time_steps] == [4, 5]
    for step in [*sc.report.steps, *sc.report.time_steps]:
        assert step.time_backward > 0, step  # without the gradient on out.loss it used to stay 0
