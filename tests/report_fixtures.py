"""Helpers for report tests: synthetic result rows and an HTML parser that reads the report's tables back."""

from __future__ import annotations

from html.parser import HTMLParser

import numpy as np

GIB = 1024**3


class _Page(HTMLParser):
    """Collects every table (by class) as rows of cell texts (`row_classes`: each row's class, e.g. "warning"
    for a row's measurement warning line), and every <img> src."""

    def __init__(self):
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.row_classes: dict[str, list[str]] = {}
        self.images: list[str] = []
        self._table = self._row = self._cell = self._classes = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self._table = self.tables.setdefault(attrs.get("class", ""), [])
            self._classes = self.row_classes.setdefault(attrs.get("class", ""), [])
        elif tag == "tr" and self._table is not None:
            self._row = []
            self._classes.append(attrs.get("class") or "")
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []
        elif tag == "img":
            self.images.append(attrs["src"])

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self._table.append(self._row)
            self._row = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def parse(html_text: str) -> _Page:
    page = _Page()
    page.feed(html_text)
    return page


def run_row(gpus: int, bs: int, **overrides) -> dict:
    base = {
        "experiment_id": f"{gpus:06x}{bs:06x}",
        "scenario": "sft",
        "framework_config": "fsdp",
        "peft_method": "lora",
        "model_name_or_path": "org/tiny-llama",
        "num_gpus": gpus,
        "per_device_train_batch_size": bs,
        "effective_batch_size": gpus * bs,
        "max_seq_len": 128,
        "gpu_name": "NVIDIA H100 80GB HBM3",
        "status": "ok",
        "error_messages": np.nan,
        "train_nonpad_tokens_per_second": 1000.0 * gpus * bs,
        "train_nonpad_tokens_per_second_per_device": 1000.0 * bs,
        "mfu": 0.05 * bs + 0.0125,
        "mem_peak_torch_mem_alloc_in_bytes": (2 + 0.25 * bs) * GIB,
        "scan_mem_peak_allocated": (2 + 0.25 * bs) * GIB,
        "train_runtime": 12.5 * bs,
        "train_loss": 2.0 + 0.0001 * bs,
        "scan_mem_params": 1.0 * GIB,
        "scan_mem_grads": 0.25 * GIB,
        "scan_mem_optimizer": 0.5 * GIB,
        "scan_mem_activations": 0.25 * bs * GIB,
        "scan_mem_temporaries": 0.25 * GIB,
        "scan_time_forward": 0.025 * bs,
        "scan_time_backward": 0.05 * bs,
        "scan_time_optimizer": 0.01,
        "scan_time_other": 0.005,
        "scan_time_step": 0.075 * bs + 0.015,
        "torch_version": "2.11.0",
        "device_type": "cuda",
        "steady_nonpad_tokens_per_second": 1200.0 * gpus * bs,
        "steady_nonpad_tokens_per_second_per_device": 1200.0 * bs,
        "steady_mfu": 0.06 * bs,
        "steady_step_time_median": 0.0625 * bs,
        "steady_step_time_cv": 0.01,
        "steady_padding_fraction": 0.0 if bs % 8 == 0 else 0.25,
        "synthetic_length_distribution": "fixed" if bs % 8 == 0 else "uniform",
        "scan_attention_backend": "flash" if bs % 8 == 0 else "efficient",
        "pred_mem_activations": 0.25 * bs * GIB * 1.01,
        "pred_error_activations": 0.01,
        "pred_mem_params": 1.0 * GIB,
        "pred_error_params": 0.0,
    }
    base.update(overrides)
    return base


def failed_row(bs: int, status: str, error: str) -> dict:
    r = run_row(1, bs, status=status, error_messages=error)
    for k in list(r):
        if k.startswith(("train_", "mem_", "scan_", "steady_", "pred_")) or k == "mfu":
            r[k] = np.nan
    return r
