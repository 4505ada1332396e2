"""The variants one quantize-compare run compares: read and checked from its settings before anything loads
(schemes, recipes, methods, the caller's modules, checkpoints and their names), then built on the loaded reference."""

from __future__ import annotations

import time
from dataclasses import dataclass

from infoeval.input.prepare import Prepared, Reporter
from infoeval.measure.paired import PairedSettings
from infoeval.models.checkpoints import load_checkpoints
from infoeval.models.objects import check_variants
from infoeval.quant.apply import build_variants
from infoeval.quant.methods.calibration import Calibration, for_methods
from infoeval.quant.methods.variant import build_method_variant
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
    """The variants in the result's order: the schemes' and recipes', the methods' (calibrated on their own text
    where they learn from one), the caller's ``modules`` (checked against the reference before any forward pass),
    then the checkpoints, loaded; with the calibration and the seconds the quantizing took (``quantize_s``) and,
    with checkpoints, their loading (``checkpoints_load_s``)."""
    reporter.stage("quantizing")
    t0 = time.perf_counter()
    variants = build_variants(p.loaded.model, plan.schemes, plan.recipes, settings.include, settings.exclude)
    calibration = for_methods(plan.methods, settings.calibration, p.text, p.stream, p.loaded.tokenizer)  # autoround:…
    variants += [
        build_method_variant(p.loaded.model, m, settings.include, settings.exclude, p.loaded.tokenizer, calibration)
        for m in plan.methods
    ]
    quantize_s = time.perf_counter() - t0
    check_variants(p.loaded, plan.modules)  # before any forward pass
    variants += list(plan.modules)
    seconds = {"quantize_s": quantize_s}
    if plan.checkpoints:
        reporter.stage("loading checkpoints")
        t0 = time.perf_counter()
        variants += load_checkpoints(plan.checkpoints, p.loaded, device_map)
        seconds["checkpoints_load_s"] = time.perf_counter() - t0
    return variants, calibration, seconds
