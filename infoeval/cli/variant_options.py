"""The options that choose the variants measured against the reference, as ``VariantSettings`` declares them
(schemes, module globs, recipes, the noise floor), and the calibration of calibrated methods
(``@calibration_options``), for the commands not yet made from a request (``cli/command.py``)."""

from __future__ import annotations

from infoeval.cli.signatures import extend
from infoeval.quant.variant_settings import CalibrationSettings, VariantSettings


def _declared(cls) -> dict:
    from infoeval.cli.command import parameter
    from infoeval.input.fields import entries

    return {k: parameter(e) for k, e in entries(cls).items() if e.opt.command_line}


_VARIANTS = _declared(VariantSettings)
SchemesOpt, IncludeOpt, ExcludeOpt, RecipeOpt, FloorOpt, FloorSeedOpt = (
    _VARIANTS[k].annotation for k in ("schemes", "include", "exclude", "recipes", "floor", "floor_seed")
)
_CALIBRATION = list(_declared(CalibrationSettings).values())


def calibration_options(command):
    """Give a command the calibration options of the calibrated methods (autoround:…), as ``CalibrationSettings``
    declares them; they reach it as one ``calibration_settings: CalibrationSettings`` argument."""
    return extend(
        command,
        "calibration_settings",
        _CALIBRATION,
        lambda values: CalibrationSettings(*(values[p.name] for p in _CALIBRATION)),
    )
