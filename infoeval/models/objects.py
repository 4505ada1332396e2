"""Models the caller holds in memory, given where a spec string goes: a transformers causal LM and its tokenizer
(``ModelObject``, loaded as it is: on its own device, in its own dtype, its weights untouched), and a module that
runs as one more variant beside the reference (``ModuleVariant``: a QAT or pruned copy sharing its tokenizer).

Provenance says what was passed: the class, parameter count, dtype, device and, where cheap (on the CPU, at most
``DIGEST_LIMIT`` bytes), the sha256 of its state dict (names, dtypes, shapes and bytes); else "in-memory object".
"""

from __future__ import annotations

import contextlib
import hashlib
from dataclasses import dataclass

import torch

from infoeval.errors import UsageError
from infoeval.models.records import LoadedModel, ModelInfo, tokenizer_info

DIGEST_LIMIT = 1 << 30  # bytes of tensors hashed at most (about 1.5 s of sha256)
IN_MEMORY = "in-memory object"


@dataclass(frozen=True, eq=False)
class ModelObject:
    """A loaded causal LM and its tokenizer, named ``name`` in results (its class name unless given)."""

    model: torch.nn.Module
    tokenizer: object
    name: str

    def __str__(self) -> str:  # where a spec string is printed ("loading …", run folder names)
        return self.name


def _checked_module(model, what: str) -> torch.nn.Module:
    if (
        not isinstance(model, torch.nn.Module)
        or not callable(getattr(model, "get_output_embeddings", None))
        or model.get_output_embeddings() is None
    ):
        raise UsageError(
            f"{what} must be a model spec (a string) or a transformers causal LM (an nn.Module with an output "
            f"embedding), not {type(model).__name__}"
        )
    return model


def model_object(model, tokenizer, name: str | None = None, what: str = "model") -> str | ModelObject:
    """A spec string as it is, or a checked ``ModelObject`` of a module and its tokenizer (a usage error naming the
    keyword when either is missing or of the wrong kind)."""
    if isinstance(model, str):
        if tokenizer is not None:
            raise UsageError(f"tokenizer= goes with a model object; a {what} spec ('{model}') brings its own tokenizer")
        return model
    _checked_module(model, what)
    if tokenizer is None or not callable(getattr(tokenizer, "encode", None)):
        raise UsageError(f"a {what} object needs its tokenizer: pass tokenizer=… (a transformers tokenizer)")
    return ModelObject(model, tokenizer, name or type(model).__name__)


def weights_of(model: torch.nn.Module) -> tuple[torch.device, torch.dtype]:
    """The device of a module's first parameter and the dtype of its first floating-point one (a quantized model's
    packed integer codes say nothing of the dtype it computes in)."""
    params = list(model.parameters())
    if not params:
        raise UsageError(f"the model object ({type(model).__name__}) has no parameters")
    floating = next((p.dtype for p in params if p.is_floating_point()), torch.float32)
    return params[0].device, floating


def state_digest(model: torch.nn.Module) -> str | None:
    """sha256 of the state dict (names, dtypes, shapes, bytes) where cheap: every tensor a plain one on the CPU and
    at most DIGEST_LIMIT bytes in all; else None."""
    state = model.state_dict()
    tensors = [(k, t) for k, t in state.items() if isinstance(t, torch.Tensor)]
    if any(t.device.type != "cpu" or type(t) not in (torch.Tensor, torch.nn.Parameter) for _, t in tensors):
        return None
    if sum(t.numel() * t.element_size() for _, t in tensors) > DIGEST_LIMIT:
        return None
    h = hashlib.sha256()
    for k, t in sorted(tensors, key=lambda kt: kt[0]):
        h.update(f"{k}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def describe(model: torch.nn.Module) -> dict:
    """What the provenance says of an in-memory module."""
    device, dtype = weights_of(model)
    config = getattr(model, "config", None)
    return {
        "class": type(model).__name__,
        "architecture": (getattr(config, "architectures", None) or [type(model).__name__])[0],
        "model_type": getattr(config, "model_type", None) or "unknown",
        "n_parameters": sum(p.numel() for p in model.parameters()),
        "dtype": str(dtype).replace("torch.", ""),
        "device": str(device),
        "sha256": state_digest(model) or IN_MEMORY,
    }


def load_object(obj: ModelObject, device: torch.device, dtype: torch.dtype, device_map: str | None):
    """The object as a ``LoadedModel``, used where it is: a device, dtype or device map other than its own is a usage
    error (moving or casting it would change the caller's model)."""
    own_device, own_dtype = weights_of(obj.model)
    if device_map is not None:
        raise UsageError("device_map is for loading a model; a model object is used where its weights are")
    if own_device.type != device.type or (device.index is not None and own_device != device):
        raise UsageError(
            f"device '{device}' was asked for but the model object's weights are on {own_device}; move the "
            "model or leave device='auto'"
        )
    if own_dtype != dtype:
        raise UsageError(
            f"dtype '{str(dtype).replace('torch.', '')}' was asked for but the model object computes in "
            f"{str(own_dtype).replace('torch.', '')}; cast the model or leave dtype='auto'"
        )
    d = describe(obj.model)
    info = ModelInfo(
        spec=obj.name,
        kind="object",
        dtype=d["dtype"],
        device=d["device"],
        architecture=d["architecture"],
        model_type=d["model_type"],
        n_parameters=d["n_parameters"],
        sha256=d["sha256"],
        tokenizer=tokenizer_info(obj.tokenizer, f"{type(obj.tokenizer).__name__} (in-memory object)"),
    )
    return LoadedModel(obj.model, obj.tokenizer, info)


def own_settings(model, run: dict) -> dict:
    """The run keywords with device='auto' and dtype='auto' meaning a model object's own device and dtype."""
    if not isinstance(model, ModelObject):
        return run
    device, dtype = weights_of(model.model)
    own = {"device": str(device), "dtype": str(dtype).replace("torch.", "")}
    return run | {k: v for k, v in own.items() if run.get(k, "auto") == "auto"}


@contextlib.contextmanager
def evaluating(*models):
    """The modules of the model objects and module variants among ``models`` (spec strings are passed over) in eval
    mode (no dropout) for the run, each put back in the mode it was in afterwards."""
    modules = [m.model for m in models if isinstance(m, (ModelObject, ModuleVariant))]
    modes = [(m, [s.training for s in m.modules()]) for m in modules]
    for m in modules:
        m.eval()
    try:
        yield
    finally:
        for m, flags in modes:
            for sub, flag in zip(m.modules(), flags):
                sub.training = flag


@dataclass(frozen=True, eq=False)
class ModuleVariant:
    """A module the caller built (a QAT copy, a pruned one, one loaded with a ``quantization_config``), run as one
    more variant in the reference's lockstep; ``tokenizer``: its own, when given, checked against the reference's."""

    name: str
    model: torch.nn.Module
    tokenizer: object | None = None

    def summary(self) -> dict:
        return {
            "scheme": {"name": self.name, "kind": IN_MEMORY},
            "layers_quantized": None,
            "layers_skipped": None,
            "bits_per_weight": None,
            "model": describe(self.model),
        }


def module_variants(variants, taken: set[str]) -> list[ModuleVariant]:
    """``variants={"name": module}`` (or ``(module, tokenizer)``) as ModuleVariants; a name already taken by a scheme
    or recipe, or a value that is not a causal LM, is a usage error."""
    out = []
    for name, value in (variants or {}).items():
        module, tok = value if isinstance(value, tuple) else (value, None)
        if not isinstance(name, str) or not name or name in taken or name == "reference":
            raise UsageError(f"variants: the name {name!r} is taken or empty; give each variant its own name")
        out.append(ModuleVariant(name, _checked_module(module, f"variants['{name}']"), tok))
        taken = taken | {name}
    return out


def _vocab_size(model: torch.nn.Module) -> int:
    return int(model.get_output_embeddings().weight.shape[0])


def check_variants(loaded, variants) -> None:
    """Before any forward pass: each module variant on the reference's device, with its vocabulary (and, when given,
    its tokenizer's) the reference's; else a usage error naming the variant."""
    ref_device, _ = weights_of(loaded.model)
    ref_vocab = _vocab_size(loaded.model)
    ref_tokens = loaded.tokenizer.get_vocab() if hasattr(loaded.tokenizer, "get_vocab") else None
    for v in variants:
        if not isinstance(v, ModuleVariant):
            continue
        device, _ = weights_of(v.model)
        if device != ref_device:
            raise UsageError(
                f"variant '{v.name}' is on {device} but the reference is on {ref_device}; put them on one device"
            )
        if _vocab_size(v.model) != ref_vocab:
            raise UsageError(
                f"variant '{v.name}' has a vocabulary of {_vocab_size(v.model)} tokens, the reference {ref_vocab}; "
                "a variant must share the reference's tokenizer"
            )
        if v.tokenizer is not None and ref_tokens is not None and v.tokenizer.get_vocab() != ref_tokens:
            raise UsageError(
                f"variant '{v.name}''s tokenizer differs from the reference's; a variant must share the "
                "reference's tokenizer"
            )
