"""Work done once before the matrix: prove models resolve, and preprocess each distinct dataset."""

from __future__ import annotations

import logging

from tunebench.errors import InputError, InputProblem
from tunebench.experiment.arguments import DataArguments
from tunebench.experiment.spec import ExperimentSpec

logger = logging.getLogger(__name__)


def preload_models(experiments: list[ExperimentSpec]) -> None:
    """Load config + tokenizer of every model now, so a typo fails in seconds, not hours into the matrix."""
    from tunebench.experiment.models import build_tokenizer, load_config

    problems = []
    for name in sorted({e.model_name_or_path for e in experiments}):
        try:
            load_config(name)
            build_tokenizer(name)
            logger.info("preload: %s resolves", name)
        except Exception as exc:  # any failure to load is the user's to fix; report it with the model name
            problems.append(InputProblem("model", name, f"cannot be loaded: {exc}", "check the name or path"))
    if problems:
        raise InputError(problems)


def preprocess_data(experiments: list[ExperimentSpec], build: bool = True) -> None:
    """Tokenise each distinct (dataset, tokenizer, template) once, before any launch: in a fork of the run's preload
    server where there is one (it imported transformers and datasets already), else in this process.

    With `build=False` (`--no_data_processing`) nothing is built: a missing cache entry is an input error,
    reported before anything launches.
    """
    from tunebench.execution import server_call

    return server_call.run_in_server("transformers", "preprocessing the data", _preprocess, experiments, build)


def _preprocess(experiments: list[ExperimentSpec], build: bool) -> None:
    from tunebench.experiment.data import cache_key, default_cache_dir, prepare_dataset
    from tunebench.experiment.models import build_tokenizer

    done: set[str] = set()
    tokenizers: dict[str, object] = {}
    problems: list[InputProblem] = []
    for experiment in experiments:
        data_args = DataArguments(**experiment.entry.get("data", {}))  # typed once, when the matrix was validated
        name = experiment.model_name_or_path
        if name not in tokenizers:
            tokenizers[name] = build_tokenizer(name)
        tokenizer = tokenizers[name]
        text_field = experiment.value("training", "dataset_text_field") or "text"
        seed = experiment.value("training", "seed")
        key = cache_key(data_args, tokenizer, text_field, seed)
        if key in done:
            continue
        done.add(key)
        if not build:
            if not (default_cache_dir() / key / "dataset_info.json").is_file():
                problems.append(InputProblem(
                    "--no_data_processing", f"scenario {experiment.scenario!r}",
                    f"no preprocessed data for {data_args.training_data_path!r} with {name} in {default_cache_dir()}",
                    "run once without --no_data_processing to build the cache"))
            continue
        try:
            prepare_dataset(data_args, tokenizer, text_field, seed=seed)
        except Exception as exc:  # a bad data file is input error: report it before launching anything
            problems.append(InputProblem("data", data_args.training_data_path, f"preprocessing failed: {exc}",
                                         "check the file's format and its text field"))
    if problems:
        raise InputError(problems)
