"""The variants one quantize-compare run compares: read and checked from its settings before anything loads
(schemes, recipes, methods, the caller's modules, checkpoints and their names), then built on the loaded reference."""

from __future__ import annotations

import time
from dataclasses import dataclass

from infoeval.input.prepare import Prepared, Reporter
from infoeval.measure.paired import PairedSettings
from infoeval.quant import handlers
from infoeval.quant.handlers import BuildContext
from infoeval.quant.methods.calibration import Calibration, for_methods
from infoeval.quant.variant_settings import VariantSettings


@dataclass(frozen=True)
class PlannedVariants:
    """The run's variants by kind, as its settings parsed them (``quant/variant_settings.py``); nothing built yet."""

    schemes: tuple  # infoeval's rounding (Scheme)
    recipes: tuple  # the recipes, read (Recipe)
    methods: tuple  # the libraries' methods (MethodScheme: GPTQ, AutoRound, …)
    modules: tuple  # the caller's modules (ModuleVariant)
    checkpoints: tuple  # saved checkpoints (Checkpoint: source and name)


def plan_variants(settings: VariantSettings, paired: PairedSettings | None = None) -> PlannedVariants:
    """The variants by kind; a ``paired`` baseline that names none of them fails here, before anything loads
    (schemes, recipes and names were checked when the settings were made)."""
    if paired is not None:
        paired.check(settings.names)
    return PlannedVariants(settings.plain, settings.recipes, settings.methods, settings.modules, settings.checkpoints)


def build_planned(
    p: Prepared,
    plan: PlannedVariants,
    settings: VariantSettings,
    device_map,
    reporter: Reporter,
) -> tuple[list, Calibration | None, dict[str, float]]:
    """The variants in the result's order (the settings' ``specs``: schemes, recipes, methods, the caller's modules,
    checkpoints), each built by its spec's handler (``quant/handlers.py``): the methods calibrated on their own text
    where they learn from one, the caller's modules checked against the reference before any forward pass, the
    checkpoints loaded; with the calibration and the seconds the quantizing took (``quantize_s``) and, with
    checkpoints, their loading (``checkpoints_load_s``)."""
    reporter.stage("quantizing")
    t0 = time.perf_counter()
    calibration = for_methods(plan.methods, settings.calibration, p.text, p.stream, p.loaded.tokenizer)  # autoround:…
    ctx = BuildContext(p.loaded, settings.include, settings.exclude, calibration, device_map)
    specs = (*plan.schemes, *plan.recipes, *plan.methods, *plan.modules, *plan.checkpoints)
    seconds = {"quantize_s": time.perf_counter() - t0}
    variants = []
    for spec in specs:
        clock = handlers.handler(spec).clock
        if clock == "checkpoints_load_s" and clock not in seconds:
            reporter.stage("loading checkpoints")
        t0 = time.perf_counter()
        variants.append(handlers.build(spec, ctx))
        if clock:
            seconds[clock] = seconds.get(clock, 0.0) + time.perf_counter() - t0
    return variants, calibration, seconds
