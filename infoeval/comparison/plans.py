"""Which plan a quantize-compare run takes (``--plan auto|lockstep|reference-first``), chosen before anything loads:
each plan's peak estimated from the config (``memory_plan``) against the memory budget (``--memory-budget``,
default BUDGET_SHARE of the memory available now: the host's RAM, or the GPU's free memory on CUDA).

    auto             lockstep where its estimate fits the budget (it runs the reference once per window beside
                     the variants, and takes --until-se), else reference-first where that fits, else streamed
                     (a model folder with safetensors) where that fits, else refused
    lockstep         every model at once; refused when its estimate is over the budget
    reference-first  one model at a time (``reference_first``); refused when over the budget, and with --until-se
    streamed         --stream layers: each model read one decoder layer at a time (``streamed``), the next layer
                     read while one runs and the hidden states on the device; where that is over the budget, the
                     next layout that fits (``stream_layout.layouts``: no layer read ahead on the host, the states
                     parked in host memory on a GPU); refused when over the budget in each, with --until-se, and
                     for a model that is not a folder with safetensors

A refusal is one line (exit 2) before any weight loads, naming the smallest budget that would do.
"""

from __future__ import annotations

from dataclasses import dataclass

from infoeval.comparison.memory_plan import MemoryEstimate, estimate_run
from infoeval.comparison.request import PLANS, PlanSettings  # noqa: F401  (PlanSettings: re-exported)
from infoeval.comparison.streamed import unstreamable
from infoeval.engine.stream_layout import FASTEST, StreamLayout, layouts
from infoeval.errors import UsageError, spell
from infoeval.models.arenas import host_available
from infoeval.models.skeleton import is_streamable, streamable_folder

BUDGET_SHARE = 0.9  # of the memory available when the run starts: the rest for the OS and what else runs
GIB = 2**30


@dataclass(frozen=True)
class PlanChoice:
    """The plan taken, why, the budget and every plan's estimate."""

    plan: str
    reason: str
    budget: int
    estimates: dict[str, MemoryEstimate]
    layout: StreamLayout = FASTEST  # the streamed plan's

    def line(self) -> str:
        return f"plan: {self.plan} ({self.reason})"

    def to_json(self) -> dict:
        return {
            "plan": self.plan,
            "reason": self.reason,
            "budget_bytes": self.budget,
            "estimates": {name: e.to_json() for name, e in self.estimates.items()},
            **({"layout": self.layout.to_json()} if self.plan == "streamed" else {}),
        }


def available_memory(device: str) -> int:
    """Bytes available now: the GPU's free memory for a CUDA device, else the host's MemAvailable."""
    import torch

    from infoeval.models import resolve_device

    dev = resolve_device(device)
    if dev.type == "cuda":
        return int(torch.cuda.mem_get_info(dev)[0])
    return host_available()


def _gib(n: int) -> str:
    return f"{n / GIB:.1f} GiB"


def _at_least(n: int) -> str:
    """A budget in GiB rounded up to the tenth that holds ``n`` bytes."""
    return f"{-(-n * 10 // GIB) / 10:.1f}"


def _candidates(settings: PlanSettings, model_settings, variant_settings, tokens, until) -> list[str]:
    """The plans a run may take, in the order auto tries them; --stream layers' own refusals."""
    plans = ["lockstep"] if until is not None else ["lockstep", "reference-first"]
    why_not = unstreamable(variant_settings)
    if until is None and tokens is not None and why_not is None and is_streamable(model_settings.model):
        plans.append("streamed")
    if settings.stream == "layers":
        streamable_folder(model_settings.model)  # else one line: what it can stream
        if why_not is not None:
            raise UsageError(why_not)
        if tokens is None:
            raise UsageError(
                f"{spell('stream')} layers holds every window's hidden states: give {spell('max_tokens')} (its "
                "memory is planned before loading)"
            )
        return ["streamed"]
    return plans if settings.plan == "auto" else [settings.plan]


def choose(settings: PlanSettings, model_settings, variant_settings, ctx: int, tokens, until) -> PlanChoice:
    """The plan of a run (module docstring); a plan that cannot run within the budget is a usage error."""
    if until is not None and (settings.plan == "reference-first" or settings.stream == "layers"):
        raise UsageError(
            f"{spell('until_se')} runs with {spell('plan')} lockstep or auto (reference-first and {spell('stream')} "
            "layers need every window up front)"
        )
    budget = (
        int(settings.memory_budget_gib * GIB)
        if settings.memory_budget_gib is not None
        else int(BUDGET_SHARE * available_memory(model_settings.device))
    )
    plans = _candidates(settings, model_settings, variant_settings, tokens, until)
    unplanned = plans[0] if settings.plan == "auto" else settings.plan
    if model_settings.device_map:  # accelerate places the model over devices (and offloads) by its own budget
        if settings.stream == "layers":
            raise UsageError(
                f"{spell('stream')} layers places one layer at a time itself; leave out {spell('device_map')}"
            )
        return PlanChoice(unplanned, "not estimated: --device-map places the model", budget, {})
    try:
        est = {p: estimate_run(model_settings, variant_settings, ctx, p, tokens) for p in plans}
    except UsageError:  # a bad --include glob, before anything loads
        raise
    except Exception as e:  # the estimate is advice: loading the model will say what is wrong with it
        return PlanChoice(
            unplanned, f"not estimated: {(str(e).splitlines() or [type(e).__name__])[0][:160]}", budget, {}
        )
    layout = FASTEST
    if "streamed" in est and est["streamed"].total > budget:  # the next layouts, to the smallest (the refusal's)
        from infoeval.models import resolve_device

        for layout in layouts(resolve_device(model_settings.device).type)[1:]:
            est["streamed"] = estimate_run(model_settings, variant_settings, ctx, "streamed", tokens, layout)
            if est["streamed"].total <= budget:
                break
    where = "given" if settings.memory_budget_gib is not None else f"{BUDGET_SHARE:.0%} of the memory available"
    for name, e in est.items():
        if e.total <= budget:
            why = f"estimated peak {_gib(e.total)} within the {_gib(budget)} budget, {where}"
            over = [f"{n}'s estimated {_gib(e.total)}" for n, e in est.items() if e.total > budget]
            if over:
                are = "is" if len(over) == 1 else "are"
                why = f"{' and '.join(over)} {are} over the {_gib(budget)} budget; " + why
            if name == "streamed" and layout.note():
                why += f"; {layout.note()}"
            return PlanChoice(name, why, budget, est, layout if name == "streamed" else FASTEST)
    least = min(est.values(), key=lambda e: e.total)
    raise UsageError(
        f"{' and '.join(f'{n} (estimated {_gib(e.total)})' for n, e in est.items())} cannot run within the memory "
        f"budget of {_gib(budget)} ({where}); the smallest that would do: {spell('memory_budget')} "
        f"{_at_least(least.total)}"
        + (
            f" (without {spell('until_se')}, reference-first may fit)"
            if until is not None and settings.plan == "auto"
            else ""
        )
    )
