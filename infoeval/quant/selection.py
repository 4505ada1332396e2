"""Which layers a scheme quantizes. By default every ``nn.Linear`` inside the decoder blocks (the model's largest
``nn.ModuleList``, e.g. ``model.layers``) is quantized; the head, embeddings and norms are not. ``include`` globs
add layers (e.g. ``lm_head``), ``exclude`` globs remove them (``fnmatch`` on the qualified module name). Every
Linear layer of the model appears in the report, quantized or skipped with the reason, and so do the embeddings
(skipped).
"""

from __future__ import annotations

import fnmatch

import torch

from infoeval.errors import UsageError, spell


def decoder_prefix(model: torch.nn.Module) -> str | None:
    """Qualified name of the largest ModuleList (the decoder blocks), e.g. ``model.layers``."""
    best, best_n = None, -1
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.ModuleList):
            n = sum(p.numel() for p in mod.parameters())
            if n > best_n:
                best, best_n = name, n
    return best


def plan_layers(
    model: torch.nn.Module, include: list[str] = (), exclude: list[str] = ()
) -> list[tuple[str, bool, str]]:
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
            raise UsageError(
                f"{spell('include')} '{glob}' matches only non-Linear modules ({hits[0]}); only Linear layers are "
                "quantized"
            )
    return plan
