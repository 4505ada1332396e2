"""The variants one quantize-compare run compares: read and checked from its settings before anything loads
(schemes, recipes, methods, the caller's modules, checkpoints and their names), then built on the loaded reference."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from infoeval.input.prepare import Prepared, Reporter
from infoeval.input.settings import VariantSettings
from infoeval.measure.paired import PairedSettings
from infoeval.models.checkpoints import checkpoint_names, load_checkpoints
from infoeval.models.objects import ModuleVariant, check_variants
from infoeval.quant.apply import build_variants
from infoeval.quant.methods import split_schemes
from infoeval.quant.methods.calibration import Calibration, for_methods
from infoeval.quant.methods.variant import build_method_variant
from infoeval.quant.recipe import read_recipe
from infoeval.quant.schemes import parse_schemes


@dataclass(frozen=True)
class PlannedVariants:
    """The variants as the settings name them, parsed and checked; nothing built yet."""

    schemes: list  # the plain schemes (QuantScheme)
    recipes: list  # the recipes, read
    methods: list  # the method schemes (MethodScheme: GPTQ, AutoRound, …)
    checkpoints: list[str]  # the checkpoints' names


def plan_variants(
    settings: VariantSettings, modules: Sequence[ModuleVariant] = (), paired: PairedSettings | None = None
) -> PlannedVariants:
    """Every variant's scheme, recipe and name, read before anything loads: a bad scheme (or a missing library), a
    name taken twice or a ``paired`` baseline that names no variant fails here. No variant at all is a usage error
    (``parse_schemes`` of an empty list)."""
    plain, methods = split_schemes(settings.schemes)
    schemes = (
        parse_schemes(plain) if plain or not (settings.recipes or methods or modules or settings.checkpoints) else []
    )
    recipes = [read_recipe(r) for r in settings.recipes]
    named = (
        [s.name for s in schemes] + [r.name for r in recipes] + [m.name for m in methods] + [m.name for m in modules]
    )
    checkpoints = checkpoint_names(settings.checkpoints, set(named))
    if paired is not None:
        paired.check(named + checkpoints)
    return PlannedVariants(schemes, recipes, methods, checkpoints)


def build_planned(
    p: Prepared,
    plan: PlannedVariants,
    settings: VariantSettings,
    modules: Sequence[ModuleVariant],
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
    check_variants(p.loaded, modules)  # before any forward pass
    variants += list(modules)
    seconds = {"quantize_s": quantize_s}
    if plan.checkpoints:
        reporter.stage("loading checkpoints")
        t0 = time.perf_counter()
        variants += load_checkpoints(settings.checkpoints, plan.checkpoints, p.loaded, device_map)
        seconds["checkpoints_load_s"] = time.perf_counter() - t0
    return variants, calibration, seconds
