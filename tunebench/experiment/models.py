"""Model resolution: bundled architecture presets (random weights, no download), local dirs and hub ids."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunebench.fileio import looks_like_local_path

logger = logging.getLogger(__name__)

# A preset is named "preset:<family>-<size>". The colon cannot appear in a hub id ("org/name"), so a preset
# can never be mistaken for (or silently shadow) a real checkpoint.
PRESET_PREFIX = "preset:"

# Config values of real model families (from their public config.json files). Weights are random: presets
# measure cost (memory, time, communication), which depends on shapes, not on trained values.
_LLAMA_COMMON = dict(model_type="llama", hidden_act="silu", rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2)
PRESETS: dict[str, dict[str, Any]] = {
    # Tiny models for CPU tests and CI: seconds per step on 2 cores.
    "llama-tiny": dict(
        _LLAMA_COMMON, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=512, max_position_embeddings=2048, tie_word_embeddings=False,
    ),
    "llama-small": dict(
        _LLAMA_COMMON, hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=8,
        num_key_value_heads=4, vocab_size=2048, max_position_embeddings=4096, tie_word_embeddings=False,
    ),
    "llama-3.2-1b": dict(
        _LLAMA_COMMON, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
        num_key_value_heads=8, head_dim=64, vocab_size=128256, max_position_embeddings=131072,
        rope_theta=500000.0, tie_word_embeddings=True, bos_token_id=128000, eos_token_id=128001,
    ),
    "llama-3.1-8b": dict(
        _LLAMA_COMMON, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=8, vocab_size=128256, max_position_embeddings=131072, rope_theta=500000.0,
        tie_word_embeddings=False, bos_token_id=128000, eos_token_id=128001,
    ),
    "mistral-7b": dict(
        model_type="mistral", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, vocab_size=32000, max_position_embeddings=32768,
        rms_norm_eps=1e-5, rope_theta=1000000.0, sliding_window=None, tie_word_embeddings=False,
        bos_token_id=1, eos_token_id=2,
    ),
    "qwen2.5-0.5b": dict(
        model_type="qwen2", hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
        num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768, rms_norm_eps=1e-6,
        rope_theta=1000000.0, tie_word_embeddings=True, bos_token_id=151643, eos_token_id=151643,
    ),
    "qwen2.5-7b": dict(
        model_type="qwen2", hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
        num_attention_heads=28, num_key_value_heads=4, vocab_size=152064, max_position_embeddings=32768,
        rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False, bos_token_id=151643,
        eos_token_id=151643,
    ),
    "granite-3.1-2b": dict(
        model_type="granite", hidden_size=2048, intermediate_size=8192, num_hidden_layers=40,
        num_attention_heads=32, num_key_value_heads=8, vocab_size=49155, max_position_embeddings=131072,
        rms_norm_eps=1e-5, rope_theta=5000000.0, tie_word_embeddings=True, embedding_multiplier=12.0,
        logits_scaling=8.0, residual_multiplier=0.22, attention_multiplier=0.015625, bos_token_id=0,
        eos_token_id=0,
    ),
    "mixtral-8x7b": dict(
        model_type="mixtral", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, num_local_experts=8, num_experts_per_tok=2,
        vocab_size=32000, max_position_embeddings=32768, rms_norm_eps=1e-5, rope_theta=1000000.0,
        tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
    ),
    "gpt-bigcode-1b": dict(
        model_type="gpt_bigcode", n_embd=2048, n_layer=24, n_head=16, n_inner=8192, vocab_size=49152,
        n_positions=8192, multi_query=True, activation_function="gelu_pytorch_tanh", bos_token_id=0,
        eos_token_id=0,
    ),
}


# The hub checkpoints each preset has the shape of (their public config.json), and the quantized uploads of them that
# fms-acceleration's reference CSVs name: a CSV row of one of these ids compares with the preset's rows.
PRESET_HUB_IDS: dict[str, tuple[str, ...]] = {
    "llama-3.2-1b": ("meta-llama/Llama-3.2-1B",),
    "llama-3.1-8b": ("meta-llama/Llama-3.1-8B", "meta-llama/Meta-Llama-3.1-8B"),
    "mistral-7b": ("mistralai/Mistral-7B-v0.1", "TheBloke/Mistral-7B-v0.1-GPTQ"),
    "qwen2.5-0.5b": ("Qwen/Qwen2.5-0.5B",),
    "qwen2.5-7b": ("Qwen/Qwen2.5-7B",),
    "granite-3.1-2b": ("ibm-granite/granite-3.1-2b-base", "ibm-granite/granite-3.1-2b-instruct"),
    "mixtral-8x7b": ("mistralai/Mixtral-8x7B-v0.1", "mistralai/Mixtral-8x7B-Instruct-v0.1",
                     "TheBloke/Mixtral-8x7B-Instruct-v0.1-GPTQ"),
}


def preset_for_hub_id(hub_id: str) -> str | None:
    """`preset:<name>` whose shape a hub checkpoint has (case-insensitive), or None."""
    wanted = str(hub_id).lower()
    return next((PRESET_PREFIX + name for name, ids in PRESET_HUB_IDS.items() if wanted in map(str.lower, ids)), None)


@dataclass(frozen=True)
class ModelSource:
    """Where a model comes from: a bundled preset, a local directory, or a hub id (needs a network)."""

    kind: str  # "preset" | "local" | "hub"
    name: str


def resolve_model_source(model_name_or_path: str) -> ModelSource:
    """Classify a model name; raises ValueError with the fix when it cannot resolve offline."""
    if model_name_or_path.startswith(PRESET_PREFIX):
        preset = model_name_or_path[len(PRESET_PREFIX):]
        if preset not in PRESETS:
            raise ValueError(
                f"unknown preset {model_name_or_path!r}; bundled presets: "
                + ", ".join(PRESET_PREFIX + p for p in sorted(PRESETS))
            )
        return ModelSource("preset", preset)
    if os.path.isdir(model_name_or_path):
        if not os.path.isfile(os.path.join(model_name_or_path, "config.json")):
            raise ValueError(f"local model directory {model_name_or_path!r} has no config.json")
        return ModelSource("local", model_name_or_path)
    if looks_like_local_path(model_name_or_path):
        raise ValueError(f"local model directory {model_name_or_path!r} does not exist (a path that looks local is "
                         "never looked up on a hub)")
    if model_name_or_path.count("/") == 1 and all(model_name_or_path.split("/")):
        return ModelSource("hub", model_name_or_path)
    raise ValueError(
        f"model {model_name_or_path!r} is neither a preset ({PRESET_PREFIX}<name>), an existing local directory "
        "with config.json, nor a hub id (org/name)"
    )


def load_config(model_name_or_path: str):
    """The transformers config for a model; presets need no file and no network."""
    from transformers import AutoConfig

    source = resolve_model_source(model_name_or_path)
    if source.kind == "preset":
        values = dict(PRESETS[source.name])
        return AutoConfig.for_model(values.pop("model_type"), **values)
    return AutoConfig.from_pretrained(model_name_or_path)


# Files that make a local folder a real checkpoint (weights) or give it its own tokenizer. A folder holding only
# config.json is an architecture to benchmark with random weights (optimum-benchmark's `no_weights`).
_WEIGHT_FILES = ("*.safetensors", "*.bin", "*.pt", "*.pth", "*.safetensors.index.json", "*.bin.index.json")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "spiece.model")


def has_weights(folder: str) -> bool:
    return any(next(Path(folder).glob(pattern), None) is not None for pattern in _WEIGHT_FILES)


def has_tokenizer(folder: str) -> bool:
    return any((Path(folder) / name).is_file() for name in _TOKENIZER_FILES)


def build_tokenizer(model_name_or_path: str):
    """A tokenizer: the checkpoint's own, or an offline byte-level tokenizer generated here for presets and for
    local folders without one (a config.json-only architecture).

    Byte-level ids stay below 259, under every preset's vocab size (the smallest is 512) and any real model's.
    """
    source = resolve_model_source(model_name_or_path)
    if source.kind == "hub" or (source.kind == "local" and has_tokenizer(model_name_or_path)):
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model_name_or_path)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        return tokenizer
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<s>", "</s>"]
    byte_alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {tok: i for i, tok in enumerate(specials + sorted(byte_alphabet))}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", bos_token="<s>", eos_token="</s>", model_max_length=1 << 20
    )
    tokenizer.chat_template = (
        "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}</s>{% endfor %}"
        "{% if add_generation_prompt %}<s>assistant: {% endif %}"
    )
    return tokenizer


def random_init_of(model_name_or_path: str) -> bool:
    """Whether the model gets random weights: a preset, or a local folder without weights."""
    source = resolve_model_source(model_name_or_path)
    return source.kind == "preset" or (source.kind == "local" and not has_weights(model_name_or_path))


def weights_dtype(model_name_or_path: str, torch_dtype: str = "auto"):
    """The torch dtype the weights are made in: the given one, or for `auto` the config's (float32 without one) for
    random weights and transformers' `auto` for a checkpoint."""
    import torch

    if torch_dtype != "auto":
        return getattr(torch, torch_dtype)
    if not random_init_of(model_name_or_path):
        return "auto"
    config = load_config(model_name_or_path)
    return getattr(torch, str(getattr(config, "dtype", None) or "float32").removeprefix("torch."), torch.float32)


def random_builder(model_name_or_path: str, dtype, attn_implementation: str | None = None, init_device: str = "cpu"):
    """(config, build): `build()` makes the model with random weights, directly in `dtype` on `init_device`. No
    float32 copy first: an 8B preset would otherwise need 32 GB of host memory before the cast; on a GPU the random
    init takes seconds instead of minutes of host time per rank (which timed out 8B runs on 4 GPUs)."""
    import torch
    from transformers import AutoModelForCausalLM

    config = load_config(model_name_or_path)
    kwargs = {"attn_implementation": attn_implementation} if attn_implementation else {}

    def build():
        with torch.device(init_device):
            return AutoModelForCausalLM.from_config(config, dtype=dtype, **kwargs)

    return config, build


def load_model(model_name_or_path: str, torch_dtype: str = "auto", attn_implementation: str | None = None,
               init_device: str = "cpu", quantization=None, seed: int = 0):
    """Instantiate the causal-LM: random init for presets and for local folders without weights (on
    `init_device`), the checkpoint's weights otherwise; a quantized base through transformers' bitsandbytes
    loader (tunebench.experiment.quantization), placed on `init_device`."""
    from transformers import AutoModelForCausalLM

    dtype = weights_dtype(model_name_or_path, torch_dtype)
    kwargs = {"attn_implementation": attn_implementation} if attn_implementation else {}
    random_init = random_init_of(model_name_or_path)
    config, build = random_builder(model_name_or_path, dtype, attn_implementation, init_device) if random_init \
        else (None, None)
    if quantization is not None and quantization.enabled:
        from tunebench.experiment.quantization import bnb_config, random_checkpoint, restore_rng_state

        path = random_checkpoint(config, dtype, seed, init_device, build) if random_init else model_name_or_path
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, quantization_config=bnb_config(quantization),
                                                     device_map={"": init_device}, **kwargs)
        restore_rng_state(path, init_device)
        logger.info("loaded %s quantized (%s)", model_name_or_path, quantization.label())
        return model
    if random_init:
        model = build()
        logger.info("built %s with random weights (%s)", model_name_or_path, dtype)
        return model
    return AutoModelForCausalLM.from_pretrained(model_name_or_path, dtype=dtype, **kwargs)
