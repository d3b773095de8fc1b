"""Hub model ids, asked once before anything downloads: reachable, or one problem naming the cause and the fix.

Without the check, an offline machine spends ~50 s per load in huggingface_hub's retries (printed for the config
and again for the tokenizer), and the OSError that transformers raises at the end reads like a disk fault.
"""

from __future__ import annotations

import logging
import os
import socket

from tunebench.errors import InputProblem

logger = logging.getLogger(__name__)

PROBE_SECONDS = 10.0  # one metadata request; the hub answers in well under a second when it is reachable
_OFFLINE_VALUES = {"1", "true", "yes", "on"}
_OTHER_SOURCES = "a local folder with config.json, or a preset:<name>"


def offline_requested() -> bool:
    """HF_HUB_OFFLINE (or transformers' older TRANSFORMERS_OFFLINE) is set: no request may leave the machine."""
    return any(os.environ.get(name, "").strip().lower() in _OFFLINE_VALUES
               for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


_OTHER_DATA = "'synthetic' or a local .json/.jsonl/.parquet file"


def _cached(model: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(model, "config.json")
    return isinstance(found, str)


def _chain(exc: BaseException):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def network_cause(exc: BaseException) -> str | None:
    """What kept a request from the hub, in words, or None when `exc` is not a network failure."""
    chain = list(_chain(exc))
    names = [type(e).__name__ for e in chain]
    if any(isinstance(e, socket.gaierror) for e in chain):
        return "cannot resolve the hub's host name (no network or no DNS)"
    if any("Timeout" in type(e).__name__ or isinstance(e, TimeoutError) for e in chain):
        return "no answer from the hub in time (network, proxy or firewall)"
    if any(name in ("ConnectError", "ConnectionError", "ConnectionRefusedError", "ProxyError", "NetworkError",
                    "RemoteProtocolError", "LocalEntryNotFoundError") for name in names):
        return "cannot connect to the hub (network, proxy or firewall)"
    return None


def _problem(name: str, exc: Exception, kind: str = "model") -> InputProblem:
    """The cause of a failed request about a hub model (or, `kind="data"`, a hub dataset), with its fix."""
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError

    endpoint = _endpoint()
    page = f"{endpoint}/{'datasets/' if kind == 'data' else ''}{name}"
    other = _OTHER_SOURCES if kind == "model" else _OTHER_DATA
    if isinstance(exc, GatedRepoError):
        return InputProblem(kind, name, "gated on the hub: its licence must be accepted by a logged-in user",
                            f"accept it at {page}, then `hf auth login` or set HF_TOKEN")
    if isinstance(exc, RepositoryNotFoundError):
        return InputProblem(kind, name, "not found on the hub (or private)",
                            f"check the id at {page}; if private, `hf auth login` or set HF_TOKEN; or use {other}")
    cause = network_cause(exc)
    if cause:
        if kind == "model" and _cached(name):
            fix = "it is in the hub cache: set HF_HUB_OFFLINE=1 to use that copy"
        else:
            fix = f"connect to {endpoint}, or use {other}" + ("" if kind == "model" else
                                                              " (HF_HUB_OFFLINE=1 uses a copy cached here before)")
        return InputProblem(kind, name, f"{cause}: {endpoint}", fix)
    if isinstance(exc, HfHubHTTPError) and exc.response is not None:
        return InputProblem(kind, name, f"the hub answered HTTP {exc.response.status_code}",
                            f"try again later, or use {other}")
    return InputProblem(kind, name, f"cannot ask the hub: {type(exc).__name__}: {exc}".splitlines()[0],
                        f"use {other}")


def _hub_probe(function: str):
    """One metadata request to the hub (huggingface_hub's `model_info` or `dataset_info`), bounded in time."""
    import huggingface_hub

    def probe(name: str):
        return getattr(huggingface_hub, function)(name, timeout=PROBE_SECONDS)

    return probe


def dataset_problems(datasets: list[str], probe=None) -> list[InputProblem]:
    """One problem per hub dataset id the hub cannot serve now (offline, HF_HUB_OFFLINE: the datasets library reads
    its own cache, and says so quickly when a dataset is not there)."""
    if not datasets or offline_requested():
        return []
    probe = probe or _hub_probe("dataset_info")
    problems = []
    for name in sorted(set(datasets)):
        try:
            probe(name)
        except Exception as exc:  # as for models: a cause to name
            problems.append(_problem(name, exc, "data"))
    return problems


def _endpoint() -> str:
    from huggingface_hub import constants

    return constants.ENDPOINT.rstrip("/")


def hub_problems(models: list[str], probe=None) -> list[InputProblem]:
    """One problem per hub id that cannot be loaded here; none when every id is reachable or cached for offline
    use. `probe(model)` asks the hub for the model's metadata (default: huggingface_hub.model_info)."""
    if not models:
        return []
    probe = probe or _hub_probe("model_info")
    problems = []
    for model in sorted(set(models)):
        if offline_requested():
            if not _cached(model):
                from huggingface_hub import constants

                problems.append(InputProblem(
                    "model", model, f"HF_HUB_OFFLINE is set and it is not in the hub cache ({constants.HF_HUB_CACHE})",
                    f"download it once with a network (`hf download {model}`), or use {_OTHER_SOURCES}"))
            continue
        try:
            info = probe(model)
        except Exception as exc:  # every failure of the one request is a cause to name, not a traceback
            problems.append(_problem(model, exc))
            continue
        files = {s.rfilename for s in (getattr(info, "siblings", None) or [])}
        if files and "config.json" not in files:
            problems.append(InputProblem("model", model, "has no config.json on the hub (not a transformers model)",
                                         f"choose a model repository with config.json, or use {_OTHER_SOURCES}"))
        logger.debug("hub: %s reachable", model)
    return problems


def matrix_problems(experiments, data: bool) -> list[InputProblem]:
    """The hub models of a matrix, and with `data` its hub datasets, asked about once each."""
    from tunebench.experiment.data import dataset_fingerprint
    from tunebench.experiment.models import resolve_model_source

    models = [e.model_name_or_path for e in experiments if resolve_model_source(e.model_name_or_path).kind == "hub"]
    paths = [str(e.value("data", "training_data_path")) for e in experiments] if data else []
    return hub_problems(models) + dataset_problems([p for p in paths if dataset_fingerprint(p)["kind"] == "hub"])
