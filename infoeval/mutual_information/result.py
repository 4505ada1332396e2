"""mutual-info's typed result: what its JSON holds, read back by ``infoeval.load``."""

from __future__ import annotations

from dataclasses import dataclass

from infoeval.mutual_information.tables import mi_summary_frame
from infoeval.output.results import Result


@dataclass(frozen=True)
class MutualInfoResult(Result):
    """mutual-info: I(L) per length with its per-token view and profiles, the power-law fit, every block."""

    settings: dict
    lengths: tuple[dict, ...]
    fit: dict
    blocks: tuple[dict, ...]
    FAMILY = "mutual-info"
    SUMMARY = staticmethod(mi_summary_frame)
