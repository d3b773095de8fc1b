"""Safe file writes: atomic replacement (readers never see half a file), safe names, and writes kept inside a root."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

from scanner.atomic import atomic_write


def write_atomic(path: str | os.PathLike, data: bytes | str) -> None:
    """Write `data` (text as UTF-8) to `path` atomically, with the scanner's one writer (scanner.atomic)."""
    atomic_write(path, data.encode() if isinstance(data, str) else data)


def write_json(path: str | os.PathLike, payload) -> None:
    """`payload` as indented JSON, atomically (values JSON has no type for written as text)."""
    write_atomic(path, json.dumps(payload, indent=2, sort_keys=True, default=str))


_UNSAFE_NAME_CHARS = re.compile(r"[^A-Za-z0-9._+-]+")


def safe_name(text: str, limit: int = 64, fallback: str = "experiment") -> str:
    """A readable file-name fragment from any text: ASCII letters, digits and `. _ + -` only, no path
    separators, no `..`, no leading dot (hidden) or dash (read as an option), at most `limit` characters.

    Not unique by itself: callers append an identity (the experiment id) to keep names apart.
    """
    name = _UNSAFE_NAME_CHARS.sub("-", str(text))
    name = re.sub(r"\.{2,}", "-", name)  # '..' never survives, whatever surrounds it
    name = re.sub(r"-{2,}", "-", name).strip(".-_")
    return name[:limit].rstrip(".-_") or fallback


def ensure_inside(root: str | os.PathLike, path: str | os.PathLike) -> Path:
    """`path`, after checking that it resolves (symbolic links followed) inside `root`; ValueError if not.

    Guards every write the harness derives from user input (scenario names, folders found on disk) against
    `..`, absolute parts and links pointing elsewhere.
    """
    resolved_root = Path(root).resolve()
    resolved = Path(path).resolve()
    if resolved != resolved_root and resolved_root not in resolved.parents:
        raise ValueError(f"{path} resolves to {resolved}, outside {resolved_root}")
    return Path(path)


def looks_like_local_path(text: str, suffixes: tuple[str, ...] = ()) -> bool:
    """Whether `text` names something on this machine rather than a hub id (`org/name`): an absolute or
    `./`, `../`, `~` path, a backslash, two or more separators, one of `suffixes`, or a first folder that
    exists here. Such a path must exist: it is never looked up on a hub."""
    text = str(text)
    if text.startswith(("/", "./", "../", "~")) or "\\" in text or text.count("/") >= 2 or text in (".", ".."):
        return True
    if suffixes and text.lower().endswith(tuple(s.lower() for s in suffixes)):
        return True
    return "/" in text and os.path.isdir(text.split("/", 1)[0])


def library_cache_environment() -> dict[str, str]:
    """Where the libraries of the processes the harness starts keep their caches: under tunebench's cache root,
    never the temporary directory (importing bitsandbytes makes /tmp/torchinductor_<user> in every process that
    does, the preload server and each experiment), or where the user chose. Always named, so that an experiment's
    command.sh, run by hand, keeps it there too."""
    return {"TORCHINDUCTOR_CACHE_DIR": os.environ.get("TORCHINDUCTOR_CACHE_DIR") or str(cache_dir("inductor"))}


def cache_dir(kind: str) -> Path:
    """The harness's cache folder for `kind` (data, models, ...): under `$TUNEBENCH_CACHE`, else
    ~/.cache/tunebench. One root for every cache, so one variable moves them all."""
    return Path(os.environ.get("TUNEBENCH_CACHE", Path.home() / ".cache" / "tunebench")) / kind


LOOKED_AT = ("file", "folder", "missing", "dangling", "other")  # what looked_at says of a path it could look at


def looked_at(path: str | os.PathLike) -> str:
    """What `path` is: one of LOOKED_AT ('dangling': a link to nowhere; 'missing' also below a file), or why it
    cannot be looked at (its error, e.g. 'File name too long'). Never raises: Python 3.11's Path.is_dir and
    Path.exists raise on such a name."""
    try:
        mode = os.lstat(path).st_mode
        if stat.S_ISLNK(mode):
            mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "dangling" if os.path.lexists(path) else "missing"
    except NotADirectoryError:
        return "missing"
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    return "file" if stat.S_ISREG(mode) else "folder" if stat.S_ISDIR(mode) else "other"
