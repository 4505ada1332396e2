"""kl-fit's typed result: what its JSON holds, read back by ``infoeval.load``."""

from __future__ import annotations

from dataclasses import dataclass

from infoeval.klfit.tables import klfit_frame
from infoeval.output.results import Result


@dataclass(frozen=True)
class KLFitResult(Result):
    """kl-fit: the target p on its grid, and every fitted q with its centre, width and divergences."""

    settings: dict
    x: tuple[float, ...]
    p: tuple[float, ...]
    fits: tuple[dict, ...]
    FAMILY = "kl-fit"
    SUMMARY = staticmethod(klfit_frame)
