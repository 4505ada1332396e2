"""The draft (speculative decoding) or student (distillation) q beside a target or teacher p. Three kinds:

* ``model``:  another causal LM with the same tokenizer (vocabulary and merges are checked; where the heads are
  padded to different widths, both are compared over the tokenizer's vocabulary);
* ``scheme``: the target itself with fake-quantized weights (``quant.apply.quantize_variant``), swapped in for
  each draft forward pass: no copy of the model, only one set of quantized Linear weights;
* ``layers``: the target truncated to its first N decoder blocks, followed by its own final norm and LM head
  (self-speculation, "early exit"). The draft is a new module object that *shares* the target's embedding,
  blocks, norm and head (no weight is copied); only the list of blocks and the config (num_hidden_layers = N)
  are its own, so it gets its own KV cache. With N = the full depth it computes exactly the target's logits.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import torch

from infoeval.errors import ModelLoadError, UsageError, spell
from infoeval.models import LoadedModel, load_model, resolve_device, resolve_dtype
from infoeval.quant.apply import QuantizedVariant, WithVariant, quantize_variant
from infoeval.quant.schemes import parse_scheme
from infoeval.quant.selection import decoder_prefix

KINDS = ("model", "scheme", "layers")
_PROBE = "Speculative decoding: déjà vu — 1,234.5 tokens/s!\n\tdef f(x):\n        return x ** 2  # 你好"


@dataclass(frozen=True)
class DraftSettings:
    """Exactly one of model (a model spec), scheme (a scheme name) or layers (N ≥ 1) is set."""

    model: str | None = None
    scheme: str | None = None
    layers: int | None = None
    role: str = "draft"  # "draft" or "student": the option names in messages are --<role>, --<role>-scheme, ...

    @property
    def kind(self) -> str:
        return "model" if self.model is not None else "scheme" if self.scheme is not None else "layers"

    def check(self) -> None:
        """Option checks that need no model (done before the slow load)."""
        given = [x is not None for x in (self.model, self.scheme, self.layers)]
        r = self.role
        if sum(given) != 1:
            raise UsageError(
                f"give exactly one of {spell(r)} MODEL, {spell(r + '_scheme')} SCHEME or {spell(r + '_layers')} N"
            )
        if self.scheme is not None:
            parse_scheme(self.scheme)
        if self.layers is not None and self.layers < 1:
            raise UsageError(
                f"{spell(r + '_layers')} {self.layers} is not allowed; give a number of decoder layers ≥ 1"
            )


class Draft(WithVariant):
    """A callable model q: ``draft(input_ids=..., ...)`` runs the draft's forward pass (with a scheme's quantized
    weights swapped into the shared module for the duration of the call), with its description and tokenizer."""

    def __init__(
        self, model: torch.nn.Module, variant: QuantizedVariant | None, info: dict, tokenizer=None, width=None
    ):
        super().__init__(model, variant)
        self.info, self.tokenizer = info, tokenizer
        self.width = width  # compare the first ``width`` logits of both (heads padded differently); None: all

    def cut(self, logits: torch.Tensor) -> torch.Tensor:
        """``logits`` (the target's or this model's) cut to the ones compared."""
        return logits if self.width is None else logits[..., : self.width]


def n_layers(model: torch.nn.Module) -> int:
    """Number of decoder blocks (the length of the model's largest ModuleList)."""
    prefix = decoder_prefix(model)
    if prefix is None:
        raise UsageError(f"the model has no list of decoder blocks (nn.ModuleList); {spell('draft_layers')} needs one")
    return len(model.get_submodule(prefix))


def _shallow(module: torch.nn.Module) -> torch.nn.Module:
    """A new module object whose parameters, buffers and children are the same objects as ``module``'s, with its
    own dict of children (so replacing a child does not touch the original)."""
    new = copy.copy(module)  # a new __dict__ whose values are shared, including the _modules dict ...
    object.__setattr__(new, "_modules", dict(module._modules))  # ... so give it its own
    return new


def truncated(model: torch.nn.Module, n: int) -> torch.nn.Module:
    """The model with only its first ``n`` decoder blocks, then its final norm and head; shares every module.

    The config is copied with num_hidden_layers = n (and layer_types cut to n), so a KV cache made for the
    draft has n layers. Raises UsageError unless 1 ≤ n ≤ depth.
    """
    depth = n_layers(model)
    if not 1 <= n <= depth:
        raise UsageError(
            f"{spell('draft_layers')} {n} is out of range; the model has {depth} decoder layers, allow 1 … {depth}"
        )
    prefix = decoder_prefix(model)
    config = copy.deepcopy(model.config)
    config.num_hidden_layers = n
    if isinstance(getattr(config, "layer_types", None), (list, tuple)):
        config.layer_types = list(config.layer_types)[:n]
    parts = prefix.split(".")
    top = _shallow(model)
    made = [top]  # only these new objects get the new config; the shared modules are left untouched
    parent, original = top, model
    for name in parts[:-1]:  # e.g. "model" on the way to "model.layers"
        child = _shallow(original._modules[name])
        parent._modules[name] = child
        made.append(child)
        parent, original = child, original._modules[name]
    blocks = original._modules[parts[-1]]
    parent._modules[parts[-1]] = torch.nn.ModuleList(list(blocks)[:n])
    for mod in made:
        if getattr(mod, "config", None) is model.config:
            object.__setattr__(mod, "config", config)
    return top


def _check_same_tokenizer(target: LoadedModel, other: LoadedModel, role: str) -> dict | None:
    """Same vocabulary (token → id) and same encoding of a probe text. Returns the logits compared: None (all) where
    both heads are as wide; else both heads' widths and the tokenizer's vocabulary, compared where only the heads'
    padding differs (Qwen2.5's 0.5B and 7B heads are 151,936 and 152,064 wide over one 151,665-token tokenizer)."""
    ta, tb = target.tokenizer, other.tokenizer
    va, vb = ta.get_vocab(), tb.get_vocab()
    if va != vb:
        only_a = len(set(va) - set(vb))
        diff = sum(1 for k in set(va) & set(vb) if va[k] != vb[k])
        raise UsageError(
            f"the {role} model's tokenizer differs from the target's ({len(va)} vs {len(vb)} tokens, {only_a} not "
            f"shared, {diff} with other ids); speculative decoding and distillation need the same tokenizer"
        )
    if ta(_PROBE, add_special_tokens=False).input_ids != tb(_PROBE, add_special_tokens=False).input_ids:
        raise UsageError(
            f"the {role} model's tokenizer splits text differently from the target's (same vocabulary, other merges)"
        )
    na, nb = _n_logits(target.model), _n_logits(other.model)
    if na == nb:
        return None
    width = len(ta)
    if width > min(na, nb):
        raise UsageError(
            f"the {role} model has {nb} output logits and the target {na}, fewer than the tokenizer's {width} tokens; "
            "a head must cover the tokenizer's vocabulary"
        )
    return {"target": na, "other": nb, "compared": width}


def _n_logits(model: torch.nn.Module) -> int:
    head = model.get_output_embeddings()
    return int(head.weight.shape[0]) if head is not None else int(model.config.vocab_size)


def _count(modules) -> int:
    seen, n = set(), 0
    for m in modules:
        for p in m.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                n += p.numel()
    return n


def draft_for(target: LoadedModel, draft_settings: DraftSettings, model_settings, note=lambda line: None) -> Draft:
    """``build_draft`` on the device, dtype and device map ``model_settings`` (the target's) resolve to."""
    device = resolve_device(model_settings.device)
    dtype = resolve_dtype(model_settings.dtype, device)
    return build_draft(target, draft_settings, device, dtype, model_settings.device_map, note)


def build_draft(
    target: LoadedModel,
    draft_settings: DraftSettings,
    device: torch.device,
    dtype: torch.dtype,
    device_map=None,
    note: Callable[[str], None] = lambda line: None,
) -> Draft:
    """The draft/student described by ``draft_settings`` for ``target`` (see the module docstring); ``note`` is told
    when only the first logits of each are compared (``Draft.width``)."""
    draft_settings.check()
    if draft_settings.kind == "model":
        try:
            other = load_model(draft_settings.model, device, dtype, device_map)
        except ModelLoadError as e:
            raise ModelLoadError(f"{spell(draft_settings.role)}: {e}") from None
        compared = _check_same_tokenizer(target, other, draft_settings.role)
        info = {
            "kind": "model",
            "spec": other.info.spec,
            "model": other.info.to_json(),
            "n_parameters": other.info.n_parameters,
        }
        if compared is not None:
            info["logits_compared"] = compared
            note(
                f"the target's head has {compared['target']:,} logits and the {draft_settings.role}'s "
                f"{compared['other']:,} (padding); both are compared over the tokenizer's {compared['compared']:,} "
                "tokens"
            )
        return Draft(other.model, None, info, other.tokenizer, compared and compared["compared"])
    if draft_settings.kind == "scheme":
        variant = quantize_variant(target.model, parse_scheme(draft_settings.scheme))
        summary = variant.summary()
        info = {
            "kind": "scheme",
            "scheme": variant.name,
            "quantization": summary,
            "n_parameters": target.info.n_parameters,
            "description": f"the target fake-quantized with {variant.name}",
        }
        return Draft(target.model, variant, info, target.tokenizer)
    depth = n_layers(target.model)
    try:
        model = truncated(target.model, draft_settings.layers)
    except UsageError as e:
        role_layers = spell(draft_settings.role + "_layers")
        raise UsageError(str(e).replace(f"{spell('draft_layers')}", role_layers)) from None
    info = {
        "kind": "layers",
        "layers": draft_settings.layers,
        "of_layers": depth,
        "n_parameters": _count([model]),
        "description": f"the target's first {draft_settings.layers} of {depth} decoder layers, then its final "
        "norm and head (shared weights)",
    }
    return Draft(model, None, info, target.tokenizer)
