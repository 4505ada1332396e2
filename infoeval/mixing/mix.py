"""`infoeval mix`: per-unit KLs (a sensitivity sweep, or its JSON), the exact solver for each budget, then every
chosen mix and every uniform scheme measured on held-out windows through quantize-compare's lockstep reducer.

Held-out split (default): the run's text options fix the measured windows (the first ``--max-tokens`` tokens,
8,192 by default: exactly quantize-compare's windows, so its numbers are comparable), and the sweep runs on the
next ``--sweep-tokens`` tokens of the same text. With ``--sensitivity FILE`` nothing is swept; the result says
whether the file's text could overlap the measured tokens.
"""

from __future__ import annotations

import dataclasses
import time

import torch

from infoeval.comparison.compare import CompareColumns, run_lockstep
from infoeval.errors import UsageError, counted, spell
from infoeval.input.prepare import Prepared, Reporter, prepare, progress
from infoeval.input.settings import ModelSettings, TextSettings, WindowSettings
from infoeval.measure.column_metrics import reference_metrics, variant_metrics
from infoeval.mixing import export
from infoeval.mixing.held_out import per_unit_kls
from infoeval.mixing.problem import build_problem, parse_budget, parse_sweep
from infoeval.mixing.result import MixResult, measured_row, solution_row, target_row, unit_rows
from infoeval.mixing.settings import DEFAULT_MIX_SCHEMES, KINDS, MixSettings  # noqa: F401  (re-exported)
from infoeval.mixing.solve import check_budgets, solve
from infoeval.quant.apply import quantize_plan, quantize_variant
from infoeval.quant.recipe import Recipe, recipe_toml
from infoeval.quant.selection import decoder_prefix, plan_layers

# variants measured per pass over the windows: the quantized weights held at once are those of quantize-compare's
# three default schemes at most (six held 1.4x quantize-compare's peak on Qwen3-0.6B; each pass more runs the
# reference once more)
VARIANTS_PER_PASS = 3


def _linear_shapes(model) -> dict[str, tuple[int, ...]]:
    return {n: tuple(m.weight.shape) for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}


def _check_budgets_early(model, shapes, mix_settings: MixSettings, schemes, extra) -> None:
    """Before the sweep: every budget reachable with the units' cheapest schemes (the costs need only the
    layer shapes, not the KLs), so an impossible budget fails in seconds, not after minutes of sweeping."""
    from infoeval.sensitivities.units import enumerate_units

    rows = [
        {"unit": u.name, "kind": u.kind, "layers": list(u.layers), "scheme": s.name, "kl_mean": 0.0}
        for u in enumerate_units(model, mix_settings.by)
        for s in schemes
    ]
    problem = build_problem(rows, schemes, shapes)
    budget, _ = parse_budget(mix_settings.budget, problem)
    check_budgets(problem.cost, problem.weights, [budget, *extra])


def _check_coverage(problem, model) -> None:
    default = {n for n, selected, _ in plan_layers(model) if selected}
    covered = {n for u in problem.units for n in u.layers}
    if default - covered:
        missing = sorted(default - covered)
        raise UsageError(
            f"the sensitivity units cover {len(covered & default)} of {len(default)} quantized layers (not "
            f"{missing[0]}); "
            f"sweep every unit (no {spell('units')}) so the mix and the uniform schemes quantize the same layers"
        )


def _variant(model, problem, picks, name: str):
    assignment = problem.assignment(picks)
    plan = [
        (n, assignment.get(n), f"mix: {assignment[n].name}" if n in assignment else reason)
        for n, _, reason in plan_layers(model)
    ]
    counts = [sum(1 for s in assignment.values() if s == sch) for sch in problem.schemes]
    return quantize_plan(model, plan, problem.schemes[counts.index(max(counts))], label=name)


def _measure(p: Prepared, specs: list, reporter: Reporter) -> tuple[CompareColumns, float]:
    """Every variant of ``specs`` ((name, build)) on p's windows, ``VARIANTS_PER_PASS`` at a time."""
    cols, seconds = None, 0.0
    for i in range(0, len(specs), VARIANTS_PER_PASS):
        chunk = [build() for _, build in specs[i : i + VARIANTS_PER_PASS]]
        n = len(p.windows) * (1 + len(chunk))
        with progress(
            reporter, n, f"{counted(len(p.windows), 'held-out window')} × {counted(1 + len(chunk), 'model')}"
        ) as bar:
            got = run_lockstep(p.loaded.model, p.stream, p.windows, chunk, p.protocol.prefix_id, bar.step)
        seconds += bar.seconds
        cols = got if cols is None else CompareColumns(cols.reference, {**cols.variants, **got.variants})
        del chunk
    return cols, seconds


def _exports(p: Prepared, problem, picks, name: str, budget) -> dict:
    model = p.loaded.model
    linears = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    widths = {n: int(m.weight.shape[1]) for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    prefix = decoder_prefix(model)
    units = tuple(
        (pat, problem.schemes[k])
        for u, k in zip(problem.units, picks)
        for pat in export.unit_patterns(u.kind, u.name, u.layers, linears, prefix)
    )
    meta = {"written_by": "infoeval mix", "model": p.loaded.info.spec, "budget_bits": float(budget), "variant": name}
    recipe = Recipe(units, None, meta, name)
    assignment = problem.assignment(picks)
    return {
        "recipe": recipe_toml(recipe, f"infoeval mix: {name}, {len(problem.units)} units"),
        "llama_cpp": export.tensor_types(assignment, widths),
        "compressed_tensors": export.config_groups(assignment, widths, linears),
    }


def mix(
    model_settings: ModelSettings,
    text_settings: TextSettings,
    window_settings: WindowSettings,
    mix_settings: MixSettings,
    reporter: Reporter | None = None,
) -> tuple[MixResult, CompareColumns, dict | None]:
    """Solve and measure; returns the result, the held-out columns and the sweep's JSON (None with --sensitivity)."""
    reporter = reporter or Reporter()
    schemes = list(mix_settings.schemes)
    extra = parse_sweep(mix_settings.sweep) if mix_settings.sweep else []
    if not mix_settings.sensitivity and text_settings.max_tokens is None:
        raise UsageError(
            f"mix sweeps the tokens after the measured ones: give {spell('max_tokens')} N (not 'all'), or "
            f"{spell('sensitivity')} FILE"
        )
    run_ts = (
        text_settings
        if mix_settings.sensitivity
        else dataclasses.replace(text_settings, max_tokens=text_settings.max_tokens + mix_settings.sweep_tokens)
    )
    p_all = prepare(model_settings, run_ts, window_settings, reporter)
    shapes = _linear_shapes(p_all.loaded.model)
    if not mix_settings.sensitivity:
        _check_budgets_early(p_all.loaded.model, shapes, mix_settings, schemes, extra)
    p, rows, sweep_json, held = per_unit_kls(p_all, text_settings, mix_settings, schemes, reporter)
    model = p.loaded.model
    problem = build_problem(rows, schemes, shapes)
    _check_coverage(problem, model)
    budget, budget_scheme = parse_budget(mix_settings.budget, problem)
    t0 = time.perf_counter()
    choices = solve(problem.kl, problem.cost, problem.weights, [budget, *extra])
    solve_s = time.perf_counter() - t0
    return _finish(p, problem, choices, budget_scheme, mix_settings, sweep_json, held, reporter, solve_s)


def _entries(problem, choices) -> tuple[dict, list[str]]:
    """The variants to measure, picks → [name, kind, bits, budgets]: every uniform scheme, then each distinct mix
    the solver chose, with the budgets that chose it; and the name of each choice's variant, in order."""
    U = len(problem.units)
    entries = {}  # picks → (name, kind, bits, budgets)
    for k, s in enumerate(problem.schemes):
        entries[(k,) * U] = [s.name, "uniform", float(problem.uniform_bits(k)), []]
    names = []
    for c in choices:
        e = entries.setdefault(c.picks, [f"mix-{c.bits_per_weight:.4f}", "mix", c.bits_per_weight, []])
        e[3].append(float(c.budget_bits))
        names.append(e[0])
    return entries, names


def _specs(model, problem, entries) -> list:
    """(name, build) of each variant of ``entries``: a uniform scheme quantizes the whole model, a mix each unit
    with its own scheme; each is built only when its pass over the windows comes."""
    return [
        (
            e[0],
            (
                lambda k=k, e=e: (
                    quantize_variant(model, problem.schemes[k[0]])
                    if e[1] == "uniform"
                    else _variant(model, problem, k, e[0])
                )
            ),
        )
        for k, e in entries.items()
    ]


def _finish(p, problem, choices, budget_scheme, mix_settings, sweep_json, held, reporter, solve_s):
    """Every uniform scheme and chosen mix measured on the held-out windows, and the result built from them."""
    entries, names = _entries(problem, choices)
    cols, eval_s = _measure(p, _specs(p.loaded.model, problem, entries), reporter)
    measured = [
        measured_row(e[0], e[1], e[2], problem.predicted(k), variant_metrics(cols.reference, cols.variants[e[0]]), e[3])
        for k, e in entries.items()
    ]
    main = choices[0]
    # the units' own kind: with --sensitivity the files decide it, whatever --by says
    by = mix_settings.by if sweep_json else ",".join(dict.fromkeys(u.kind for u in problem.units))
    result = MixResult(
        p.provenance("mix", schemes=[s.name for s in problem.schemes], by=by),
        {
            **p.timings,
            "solve_s": solve_s,
            "eval_s": eval_s,
            **({f"sweep_{k}": v for k, v in sweep_json["timings"].items() if k not in p.timings} if sweep_json else {}),
        },
        settings={
            "schemes": [s.name for s in problem.schemes],
            "by": by,
            "budget": mix_settings.budget,
            "budget_bits": float(main.budget_bits),
            "budget_fraction": str(main.budget_bits),
            "sweep": mix_settings.sweep,
            "sweep_tokens": mix_settings.sweep_tokens,
            "bits_accounting": "stored bits per quantized weight: codes + fp16 scales (+ b-bit zero points); "
            "quant/bits.py",
        },
        held_out=held,
        reference=reference_metrics(cols.reference),
        units=tuple(unit_rows(problem)),
        solutions=tuple(solution_row(problem, c, n) for c, n in zip(choices, names)),
        measured=tuple(measured),
        target=target_row(measured, names[0], budget_scheme),
        exports=_exports(p, problem, main.picks, names[0], main.budget_bits),
        sensitivity={
            "source": "sweep" if sweep_json else [str(f) for f in mix_settings.sensitivity],
            "by": by,
            "reference": sweep_json["reference"] if sweep_json else None,
        },
    )
    return result, cols, sweep_json
