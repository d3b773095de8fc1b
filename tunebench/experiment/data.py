"""Training data without a hub: synthetic token sequences or local files, tokenised once and cached."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

from tunebench.fileio import cache_dir, looks_like_local_path

logger = logging.getLogger(__name__)

CACHE_VERSION = 1  # bump when the preprocessing below changes, so stale caches are never reused
_LOCAL_FORMATS = {".json": "json", ".jsonl": "json", ".parquet": "parquet"}
# Suffixes that make a data path local whatever else it looks like (data/missing.jsonl is never a hub id).
DATA_SUFFIXES = (*_LOCAL_FORMATS, ".csv", ".txt", ".arrow", ".tsv")


def data_source_problem(data_path: str) -> str | None:
    """Why `training_data_path` cannot be used, or None: 'synthetic', an existing local file of a supported
    type, or a hub dataset id `org/name`. A path that looks local must exist: it is never looked up on a hub."""
    if data_path == "synthetic":
        return None
    path = Path(data_path)
    if path.is_file():
        if path.suffix.lower() not in _LOCAL_FORMATS:
            return f"{data_path!r}: unsupported file type {path.suffix or '(none)'}; use .json, .jsonl or .parquet"
        return None
    if looks_like_local_path(data_path, DATA_SUFFIXES):
        return (f"local file {data_path!r} does not exist (a path with a folder or a data-file suffix is read "
                "from this machine, never from a hub)")
    if data_path.count("/") == 1 and all(data_path.split("/")):
        return None  # a hub dataset id
    return f"{data_path!r} is neither 'synthetic', a local .json/.jsonl/.parquet file nor a hub dataset id org/name"


def default_cache_dir() -> Path:
    return cache_dir("data")


def synthetic_lengths(num_samples: int, max_len: int, min_len: int, distribution: str, seed: int) -> list[int]:
    """Row lengths: fixed (every row max_len: padding = packing), uniform or lognormal in [min_len, max_len]."""
    import numpy as np

    rng = np.random.default_rng(seed)
    min_len = max(1, min(min_len or max_len // 4, max_len))
    if distribution == "fixed":
        lengths = np.full(num_samples, max_len)
    elif distribution == "uniform":
        lengths = rng.integers(min_len, max_len + 1, size=num_samples)
    elif distribution == "lognormal":
        # Median ~ a third of max_len with a long tail, like real instruction data.
        lengths = np.clip(rng.lognormal(np.log(max(min_len, max_len / 3)), 0.6, size=num_samples), min_len, max_len)
    else:
        raise ValueError(f"unknown synthetic_length_distribution {distribution!r}: use fixed, uniform or lognormal")
    return [int(x) for x in lengths]


def dataset_fingerprint(data_path: str) -> dict[str, Any]:
    if data_path == "synthetic":
        return {"kind": "synthetic"}
    path = Path(data_path)
    if path.is_file():
        stat = path.stat()
        return {"kind": "file", "path": str(path.resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    return {"kind": "hub", "name": data_path}


def cache_key(data_args, tokenizer, text_field: str, seed: int) -> str:
    """(dataset, tokenizer, template, preprocessing options) → key. Any change means a new cache entry."""
    payload = {
        "version": CACHE_VERSION,
        "dataset": dataset_fingerprint(data_args.training_data_path),
        "tokenizer": getattr(tokenizer, "name_or_path", ""),
        "vocab_size": len(tokenizer),
        "template": getattr(tokenizer, "chat_template", None),
        "text_field": text_field,
        "max_seq_len": data_args.max_seq_len,
        "seed": seed,
        "synthetic": [data_args.synthetic_num_samples, data_args.synthetic_length_distribution,
                      data_args.synthetic_min_len, *_corpus_key(data_args)]
        if data_args.training_data_path == "synthetic" else None,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _corpus_key(data_args) -> list:
    """The corpus's part of the cache key (the uniform corpus keeps the key it had before there was a choice)."""
    if data_args.synthetic_corpus == "uniform":
        return []
    return [data_args.synthetic_corpus, data_args.synthetic_markov_states, data_args.synthetic_markov_branching]


def _build_synthetic(data_args, tokenizer, seed: int):
    import datasets

    from tunebench.experiment.corpus import synthetic_rows

    lengths = synthetic_lengths(data_args.synthetic_num_samples, data_args.max_seq_len, data_args.synthetic_min_len,
                                data_args.synthetic_length_distribution, seed)
    return datasets.Dataset.from_dict({"input_ids": synthetic_rows(data_args, tokenizer, lengths, seed)})


def _tokenize_rows(raw, tokenizer, text_field: str, max_len: int):
    def tokenize(row):
        if "messages" in row and row["messages"] is not None:
            ids = tokenizer.apply_chat_template(row["messages"], tokenize=True)
            ids = ids["input_ids"] if hasattr(ids, "keys") else ids  # a BatchEncoding in transformers 5
            ids = list(ids)
        else:
            ids = tokenizer(row[text_field])["input_ids"] + [tokenizer.eos_token_id]
        return {"input_ids": ids[:max_len]}

    return raw.map(tokenize, remove_columns=raw.column_names)


def _load_raw(data_path: str):
    import datasets

    problem = data_source_problem(data_path)
    if problem:
        raise ValueError(f"training_data_path {problem}")
    if Path(data_path).is_file():
        suffix = Path(data_path).suffix.lower()
        return datasets.load_dataset(_LOCAL_FORMATS[suffix], data_files=data_path, split="train")
    return datasets.load_dataset(data_path, split="train")


def prepare_dataset(data_args, tokenizer, text_field: str = "text", seed: int = 42, cache_dir: str | Path = ""):
    """Return the tokenised dataset (`input_ids` rows), building and caching it unless already cached."""
    import datasets

    cache_root = Path(cache_dir or default_cache_dir())
    target = cache_root / cache_key(data_args, tokenizer, text_field, seed)
    if (target / "dataset_info.json").is_file():
        logger.info("using cached preprocessed data %s", target)
        return datasets.load_from_disk(str(target))
    # Set by `--no_data_processing`: an environment flag, not an argument, so it never changes an identity.
    if os.environ.get("TUNEBENCH_REQUIRE_DATA_CACHE") == "1":
        raise FileNotFoundError(
            f"no preprocessed data at {target}; run once without --no_data_processing to build it"
        )
    if data_args.training_data_path == "synthetic":
        dataset = _build_synthetic(data_args, tokenizer, seed)
    else:
        dataset = _tokenize_rows(_load_raw(data_args.training_data_path), tokenizer, text_field, data_args.max_seq_len)
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    dataset.save_to_disk(str(tmp))
    try:
        os.replace(tmp, target)  # atomic: a concurrent rank either sees a full cache or none
    except OSError:
        logger.info("cache %s was written concurrently; using that copy", target)
        shutil.rmtree(tmp, ignore_errors=True)
    return datasets.load_from_disk(str(target))
