"""A local model folder's config.json, checked where it enters: JSON, an object, and sizes that planning and model
building can take (a million layers would hang `plan` replaying every one)."""

from __future__ import annotations

import logging
from pathlib import Path

from tunebench.readback import Unreadable, load_json

logger = logging.getLogger(__name__)

MAX_LAYERS = 512  # the deepest released LLMs have ~130 layers; `plan` replays 512 tiny ones in ~50 s on 2 cores
# Other sizes, generously above any released model (vocabularies ~256k, hidden sizes ~25k, contexts ~10M).
MAX_SIZES = {"hidden_size": 2**17, "n_embd": 2**17, "d_model": 2**17, "intermediate_size": 2**20, "n_inner": 2**20,
             "vocab_size": 2**23, "num_attention_heads": 2**12, "n_head": 2**12, "num_key_value_heads": 2**12,
             "head_dim": 2**14, "num_local_experts": 2**12, "num_experts": 2**12, "max_position_embeddings": 2**28,
             "n_positions": 2**28}
LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def config_problem(folder: str | Path) -> tuple[str, str] | None:
    """(problem, fix) for a local model folder's config.json, or None when it can be used."""
    path = Path(folder) / "config.json"
    try:
        config = load_json(path, dict)
    except FileNotFoundError:
        return f"{path}: missing", "a local model folder needs the model's config.json"
    except Unreadable as exc:
        return str(exc), "save the model's config.json there again (a JSON object)"
    # Multimodal and composite configs keep the language model's sizes in text_config.
    sections = [("", config)] + [(f"{k}.", v) for k, v in config.items()
                                 if k.endswith("_config") and isinstance(v, dict)]
    for prefix, section in sections:
        for key in (*LAYER_KEYS, *MAX_SIZES):
            if key not in section or section[key] is None:
                continue
            value, bound = section[key], MAX_LAYERS if key in LAYER_KEYS else MAX_SIZES[key]
            if not _whole(value) or not 0 <= value <= bound:
                shown = repr(value)[:40]
                return (f"{path}: {prefix}{key}: expected a whole number in [0, {bound:,}], got {shown}",
                        "give the real model's value (tunebench refuses sizes no model has, which would never "
                        "finish building or planning)")
    return None
