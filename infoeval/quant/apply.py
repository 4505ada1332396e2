"""Which layers a scheme quantizes, the quantized weights themselves, and swapping them in and out.

By default every ``nn.Linear`` inside the decoder blocks (the model's largest ``nn.ModuleList``, e.g.
``model.layers``) is quantized; the head, embeddings and norms are not. ``include`` globs add layers (e.g.
``lm_head``), ``exclude`` globs remove them (``fnmatch`` on the qualified module name). Every Linear layer of
the model appears in the report, quantized or skipped with the reason, and so do the embeddings (skipped).

The original weights are never copied: a variant holds only its quantized weights, and ``swapped`` puts them
in place of the originals for the duration of a forward pass (replacing the Parameter objects, so a head tied
to the embeddings is quantized without touching the embeddings).
"""

from __future__ import annotations

import contextlib
import fnmatch
from dataclasses import dataclass

import torch

from infoeval.errors import UsageError
from infoeval.quant.primitives import fake_quantize, sqnr_db
from infoeval.quant.schemes import Scheme


@dataclass(frozen=True)
class LayerReport:
    name: str
    shape: tuple[int, ...]
    quantized: bool
    reason: str
    sqnr_db: float | None = None
    tied_to: str | None = None

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "shape": list(self.shape),
            "action": "quantized" if self.quantized else "skipped",
            "reason": self.reason,
            "sqnr_db": self.sqnr_db,
            "tied_to": self.tied_to,
        }


@dataclass(frozen=True)
class QuantizedVariant:
    """A scheme's quantized weights, keyed by module name, and the report of every Linear layer."""

    scheme: Scheme
    weights: dict[str, torch.nn.Parameter]
    layers: tuple[LayerReport, ...]

    @property
    def name(self) -> str:
        return self.scheme.name

    @property
    def n_quantized(self) -> int:
        return sum(1 for r in self.layers if r.quantized)

    @property
    def n_skipped(self) -> int:
        return sum(1 for r in self.layers if not r.quantized)

    def summary(self) -> dict:
        q = [r for r in self.layers if r.quantized]
        params = sum(int(torch.Size(r.shape).numel()) for r in q)
        sq = [r.sqnr_db for r in q if r.sqnr_db is not None]
        return {
            "scheme": self.scheme.as_dict(),
            "layers_quantized": len(q),
            "layers_skipped": self.n_skipped,
            "params_quantized": params,
            "sqnr_db_min": min(sq) if sq else None,
            "sqnr_db_mean": sum(sq) / len(sq) if sq else None,
            "layers": [r.as_dict() for r in self.layers],
        }


def decoder_prefix(model: torch.nn.Module) -> str | None:
    """Qualified name of the largest ModuleList (the decoder blocks), e.g. ``model.layers``."""
    best, best_n = None, -1
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.ModuleList):
            n = sum(p.numel() for p in mod.parameters())
            if n > best_n:
                best, best_n = name, n
    return best


def _tied_names(model: torch.nn.Module) -> dict[int, list[str]]:
    owners: dict[int, list[str]] = {}
    for mname, mod in model.named_modules():
        for pname, p in mod.named_parameters(recurse=False):
            owners.setdefault(id(p), []).append(f"{mname}.{pname}" if mname else pname)
    return owners


def plan_layers(model: torch.nn.Module, include: list[str] = (), exclude: list[str] = ()) -> list[tuple[str, bool, str]]:
    """(name, selected, reason) for every Linear layer, then every embedding (always skipped); globs that match
    no module are usage errors."""
    prefix = decoder_prefix(model)
    linears = [(n, m) for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    all_names = [n for n, _ in model.named_modules() if n]
    for glob in [*include, *exclude]:
        if not any(fnmatch.fnmatchcase(n, glob) for n in all_names):
            example = ", ".join(n for n, _ in linears[:1]) or "lm_head"
            raise UsageError(f"layer glob '{glob}' matches no module; names look like {example}, lm_head")
    plan = []
    for name, _ in linears:
        default = prefix is not None and name.startswith(prefix + ".")
        inc = next((g for g in include if fnmatch.fnmatchcase(name, g)), None)
        exc = next((g for g in exclude if fnmatch.fnmatchcase(name, g)), None)
        if exc is not None:
            plan.append((name, False, f"excluded by --exclude '{exc}'"))
        elif inc is not None:
            plan.append((name, True, f"included by --include '{inc}'"))
        elif default:
            plan.append((name, True, f"Linear in decoder blocks ({prefix})"))
        else:
            plan.append((name, False, f"outside the decoder blocks ({prefix}); add it with --include"))
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Embedding):
            plan.append((name, False, "embedding: only Linear layers are quantized"))
    for glob in include:
        hits = [n for n, _ in model.named_modules() if n and fnmatch.fnmatchcase(n, glob)]
        if hits and not any(fnmatch.fnmatchcase(n, glob) for n, _ in linears):
            raise UsageError(f"--include '{glob}' matches only non-Linear modules ({hits[0]}); only Linear layers are quantized")
    return plan


@torch.no_grad()
def quantize_variant(model: torch.nn.Module, scheme: Scheme, include=(), exclude=()) -> QuantizedVariant:
    """Quantize the selected layers' weights (on their own device and dtype) and report every Linear layer."""
    modules = dict(model.named_modules())
    owners = _tied_names(model)
    weights: dict[str, torch.nn.Parameter] = {}
    reports = []
    for name, selected, reason in plan_layers(model, list(include), list(exclude)):
        w = modules[name].weight
        others = [o for o in owners.get(id(w), []) if o != f"{name}.weight"]
        tied = others[0] if others else None
        if not selected:
            reports.append(LayerReport(name, tuple(w.shape), False, reason, tied_to=tied))
            continue
        w_hat = fake_quantize(w.data, scheme)
        if scheme.group_size is not None and scheme.group_size >= w.shape[1]:
            reason += f"; group {scheme.group_size} ≥ {w.shape[1]} inputs, so one group per row"
        elif scheme.group_size is not None and w.shape[1] % scheme.group_size:
            reason += f"; last group of each row has {w.shape[1] % scheme.group_size} columns"
        if tied:
            reason += f"; tied to {tied}, which keeps its original weights"
        weights[name] = torch.nn.Parameter(w_hat, requires_grad=False)
        reports.append(LayerReport(name, tuple(w.shape), True, reason, sqnr_db(w.data, w_hat), tied))
    return QuantizedVariant(scheme, weights, tuple(reports))


@contextlib.contextmanager
def swapped(model: torch.nn.Module, variant: QuantizedVariant | None):
    """Within the block the model computes with the variant's weights; the originals come back after."""
    if variant is None:
        yield model
        return
    modules = dict(model.named_modules())
    originals = {name: modules[name].weight for name in variant.weights}
    try:
        for name, param in variant.weights.items():
            modules[name].weight = param
        yield model
    finally:
        for name, param in originals.items():
            modules[name].weight = param


def swap_in(model: torch.nn.Module, variant: QuantizedVariant) -> None:
    """Put the variant's weights in the model for good."""
    modules = dict(model.named_modules())
    for name, param in variant.weights.items():
        modules[name].weight = param


@torch.no_grad()
def fake_quantize_(model: torch.nn.Module, scheme: Scheme, include=(), exclude=()) -> QuantizedVariant:
    """Quantize the model in place, for good (e.g. before saving a checkpoint); returns the report."""
    variant = quantize_variant(model, scheme, include, exclude)
    swap_in(model, variant)
    return variant


class WithVariant:
    """A callable model: ``m(input_ids=...)`` runs ``model`` with the variant's weights swapped in for the call
    (none: the model as it is). ``.model`` and ``.config`` are the shared module's."""

    def __init__(self, model: torch.nn.Module, variant: QuantizedVariant | None):
        self.model, self.variant = model, variant

    def __call__(self, **kwargs):
        with swapped(self.model, self.variant):
            return self.model(**kwargs)

    @property
    def config(self):
        return self.model.config
