"""Writes report_example_gpu.csv: SYNTHETIC GPU-shaped results (not a measurement) for report tests and docs images.

Run from the repo root: ``python tests/data/make_report_example.py``. Values follow simple formulas
(params sharded by GPU count, activations linear in batch size) so the charts have a plausible shape.
"""

import numpy as np
import pandas as pd

GiB = 1024**3
rows = []
i = 0
for peft in ["none", "lora"]:
    for fw in ["none", "fsdp"]:
        for ng in [1, 2, 4]:
            if fw == "none" and ng > 1:
                continue
            for bs in [4, 8]:
                i += 1
                params = 2.47 * GiB * (1 if fw == "none" else 1 / ng)
                trainable = 1.0 if peft == "none" else 0.012
                grads = params * trainable
                opt = params * 2 * 2 * trainable
                act = 0.9 * GiB * bs / 4
                tmp = 0.31 * GiB
                peak = params + grads + opt + act + tmp * 1.1
                fwd, bwd, optt, oth = 0.08 * bs / 4, 0.17 * bs / 4, 0.02 * trainable + 0.002, 0.006
                step = fwd + bwd + optt + oth
                tok = bs * 1024 * ng / step * (0.92 if ng > 1 else 1.0)
                rows.append(
                    dict(
                        experiment_id=f"{i:012x}",
                        scenario="sft",
                        framework_config=fw,
                        model_name_or_path="meta-llama/Llama-3.2-1B",
                        num_gpus=ng,
                        per_device_train_batch_size=bs,
                        gradient_accumulation_steps=1,
                        effective_batch_size=bs * ng,
                        max_seq_len=1024,
                        packing=True,
                        peft_method=peft,
                        torch_dtype="bfloat16",
                        learning_rate=2e-5,
                        lora_alpha=16 if peft == "lora" else np.nan,
                        r=8 if peft == "lora" else np.nan,
                        gradient_checkpointing=False,
                        status="ok",
                        error_messages="",
                        train_loss=2.31,
                        train_runtime=60 * step,
                        train_samples_per_second=bs * ng / step,
                        train_tokens_per_second=tok * 1.02,
                        train_nonpad_tokens_per_second=tok,
                        train_nonpad_tokens_per_second_per_device=tok / ng,
                        mfu=min(0.62, tok / ng * 6 * 1.24e9 / 989e12 * (1.0 if peft == "none" else 0.7)),
                        mem_peak_torch_mem_alloc_in_bytes=peak,
                        mem_torch_mem_alloc_in_bytes=params + grads + opt,
                        mem_peak_host_rss_bytes=6.1 * GiB,
                        scan_mem_params=params,
                        scan_mem_grads=grads,
                        scan_mem_optimizer=opt,
                        scan_mem_activations=act,
                        scan_mem_temporaries=tmp,
                        scan_mem_peak_allocated=peak,
                        scan_mem_peak_reserved=peak * 1.08,
                        scan_time_forward=fwd,
                        scan_time_backward=bwd,
                        scan_time_optimizer=optt,
                        scan_time_other=oth,
                        scan_time_step=step,
                        scan_tokens_per_second=tok / ng,
                        mem_nvidia_mem_reserved=peak * 1.1 / 2**20,
                        mem_nvidia_mem_reserved_max=peak * 1.12 / 2**20,
                        nvidia_gpu_util_mean=93.0,
                        energy_joules=60 * step * 640 * ng,
                        energy_joules_per_nonpad_token=640 / (tok / ng),
                        gpu_name="NVIDIA H100 80GB HBM3",
                        gpu_count=ng,
                        driver_version="550.54.15",
                        torch_version="2.11.0+cu128",
                        transformers_version="5.17.0",
                        trl_version="1.16.0",
                        peft_version="0.21.2",
                        tunebench_git_sha="0123abc",
                        device_type="cuda",
                    )
                )
# an OOM and an error
base = dict(rows[0])
for st, bs, err in [
    (
        "oom",
        64,
        'Traceback (most recent call last):\n  File "train.py", line 1\ntorch.OutOfMemoryError: CUDA out of memory. '
        'Tried to allocate 3.91 GiB. GPU 0 has a total capacity of 79.11 GiB',
    ),
    ("timeout", 32, ""),
]:
    r = {
        k: (np.nan if (k.startswith(("train_", "mem_", "scan_", "energy", "nvidia")) or k == "mfu") else v)
        for k, v in base.items()
    }
    r.update(
        status=st,
        per_device_train_batch_size=bs,
        effective_batch_size=bs,
        error_messages=err,
        experiment_id=f"{bs:012x}",
    )
    rows.append(r)
pd.DataFrame(rows).to_csv("tests/data/report_example_gpu.csv", index=False)
print(len(rows))
