"""Every output mode, option validation, other model/trainer kinds, rank merging.

Reached through the modules it calls (the Scanner callback, its option checks, records and atomic writes):
scanner/callback.py, scanner/options.py, scanner/record.py, scanner/atomic.py."""

import json

import pytest
import torch

from scanner import Scanner, ScanReport, merge_reports
from tests.fixtures.scanner import VOCAB, lm_dataset, tiny_config, tiny_llama, train

KEYS = (
    "scan_mem_params scan_mem_grads scan_mem_optimizer scan_mem_activations scan_mem_temporaries "
    "scan_mem_peak_allocated scan_mem_peak_reserved scan_time_forward scan_time_backward scan_time_optimizer "
    "scan_time_other scan_time_step scan_tokens_per_second scan_nonpad_tokens_per_second scan_micro_batches"
).split()


def test_every_output_mode(tmp_path, capsys):
    got = []
    txt, js = tmp_path / "scan.txt", tmp_path / "sub" / "scan.json"
    sc = Scanner(steps=2, output=["stdout", str(txt), str(js), got.append])
    trainer = train(tiny_llama(), sc, max_steps=3)
    out = capsys.readouterr().out
    assert "tunebench scanner - step 2" in out and "forward" in out and "params" in out
    assert txt.read_text().startswith("tunebench scanner - step 2")
    data = json.loads(js.read_text())
    step = data["steps"][0]
    assert step["step"] == 2 and isinstance(step["mem_params"], int) and isinstance(step["time_step"], float)
    assert data["summary"]["mem_params"] == step["mem_params"]
    assert got == [sc.report] and isinstance(got[0], ScanReport)
    flat = sc.flat_metrics()
    assert set(KEYS) <= set(flat)
    assert flat["scan_mem_temporaries"] is None  # CPU: allocator-only figures are absent
    logged = [h for h in trainer.state.log_history if "scan/mem_params" in h]
    assert len(logged) == 1 and logged[0]["scan/mem_params"] == flat["scan_mem_params"]
    assert logged[0]["step"] == 2


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"steps": 0}, "1-based"),
        ({"steps": "a-b"}, "cannot parse"),
        ({"steps": [5, 7, 9]}, "not contiguous"),
        ({"steps": "7-5"}, "before its start"),
        ({"steps": True}, "bool"),
        ({"output": "scan.csv"}, r"\.txt"),
        ({"output": 3}, "file path"),
        ({"memory_snapshot": "snap.txt"}, r"\.pickle"),
        ({"profile_trace": "trace.pt"}, r"\.json"),
        ({"log_to_trainer": "yes"}, "True or False"),
    ],
)
def test_bad_options_raise_at_construction(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Scanner(**kwargs)


@pytest.mark.parametrize(
    "steps, first, last", [(5, 5, 5), ("5-7", 5, 7), ((5, 7), 5, 7), (range(3, 5), 3, 4)]
)
def test_step_forms(steps, first, last):
    opts = Scanner(steps=steps, output=None).options
    assert (opts.first_step, opts.last_step) == (first, last)


def test_sequence_classification_model():
    from transformers import LlamaForSequenceClassification

    torch.manual_seed(0)
    model = LlamaForSequenceClassification(tiny_config(num_labels=3, pad_token_id=0))
    data = [
        {"input_ids": r["input_ids"], "attention_mask": r["attention_mask"], "labels": i % 3}
        for i, r in enumerate(lm_dataset())
    ]
    sc = Scanner(steps=2, output=None, log_to_trainer=False)
    train(model, sc, dataset=data)
    r = sc.report.steps[0]
    assert r.time_backward > 0 and r.mem_activations > 0 and r.micro_batches == 1


def test_prompt_tuning():
    peft = pytest.importorskip("peft")
    model = peft.get_peft_model(
        tiny_llama(), peft.PromptTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=4)
    )
    sc = Scanner(steps=2, output=None, log_to_trainer=False)
    train(model, sc)
    r = sc.report.steps[0]
    trainable = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    assert r.mem_grads == trainable and r.tokens == 2 * 32


def test_trl_sft_trainer(tmp_path):
    trl = pytest.importorskip("trl")
    from datasets import Dataset

    rows = [{"input_ids": r["input_ids"].tolist()} for r in lm_dataset(n=32, seq=24)]
    cfg = trl.SFTConfig(
        output_dir=str(tmp_path),
        max_steps=3,
        per_device_train_batch_size=2,
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        disable_tqdm=True,
        logging_strategy="no",
        dataset_kwargs={"skip_prepare_dataset": True},
        remove_unused_columns=False,
    )
    sc = Scanner(steps=2, output=None, log_to_trainer=False)

    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(VOCAB)}
    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="t1")), pad_token="t0", eos_token="t2"
    )
    trainer = trl.SFTTrainer(
        model=tiny_llama(),
        args=cfg,
        train_dataset=Dataset.from_list(rows),
        processing_class=tok,
        callbacks=[sc],
    )
    trainer.train()
    r = sc.report.steps[0]
    assert r.tokens == 2 * 24 and r.time_backward > 0


def test_merge_reports():
    a = {"scan_mem_params": 10, "scan_time_step": 1.0, "scan_rank": 0, "scan_step": 5}
    b = {"scan_mem_params": 30, "scan_time_step": 3.0, "scan_rank": 1, "scan_step": 5}
    m = merge_reports([a, b])
    assert (
        m["scan_mem_params_max"] == 30 and m["scan_mem_params_min"] == 10 and m["scan_time_step_mean"] == 2.0
    )
    assert m["scan_ranks"] == 2 and "scan_rank_max" not in m
    with pytest.raises(ValueError):
        merge_reports([])


def test_vocab_constant():
    assert VOCAB == 256
