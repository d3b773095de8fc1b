"""The Ray executor's options (`--ray_*`), owned by the plugin: where the cluster is and how folders come back."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Literal

from tunebench.bounds import Range
from tunebench.plugins import cli_option

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RaySettings:
    """The Ray executor's options."""

    address: str | None = field(default=None, metadata=cli_option(
        "--ray_address", "Ray cluster to join (`auto`, `host:port`, `ray://host:port`; `auto`: RAY_ADDRESS, else the "
        "cluster last started on this machine); default a new local Ray instance, even when another cluster runs "
        "here", metavar="ADDR"))
    connect_timeout: float = field(default=30.0, metadata=cli_option(
        "--ray_connect_timeout", "seconds to wait for the cluster at `--ray_address`; unreachable → exit 2",
        Range(0, 3600, low_open=True), type=float, metavar="S"))
    transfer: Literal["object", "shared"] = field(default="object", metadata=cli_option(
        "--ray_transfer", "how experiment folders come back: through Ray's object store, or a filesystem shared by "
        "every node", choices=["object", "shared"]))
