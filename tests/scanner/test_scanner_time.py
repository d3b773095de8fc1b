"""Phase times add up, gradient accumulation and token counting, no hooks left behind."""

import math

import pytest
import torch
from scanner_testlib import lm_dataset, no_hooks_left, tiny_llama, train
from transformers import TrainerCallback

from scanner import Scanner


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
    from scanner_testlib import Trainer, TrainingArguments

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
    from scanner_testlib import Trainer, TrainingArguments

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
    from scanner_testlib import Trainer, TrainingArguments

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
