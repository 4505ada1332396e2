"""The gate's candidate: loading it, quantizing it (--scheme, a method scheme, --recipe), and checking that its
tokenizer is the reference's."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from infoeval.errors import DataError, InfoevalError, UsageError, spell
from infoeval.input.protocols import reread_text
from infoeval.input.settings import DEFAULT_PROTOCOL, ModelSettings
from infoeval.input.tokens import encode
from infoeval.models import load_model, resolve_device, resolve_dtype
from infoeval.models.checkpoints import vocab_fingerprint
from infoeval.models.files import BUILTIN
from infoeval.quant import handlers
from infoeval.quant.apply import WithVariant
from infoeval.quant.floor import build_floor
from infoeval.quant.handlers import BuildContext, runnable
from infoeval.quant.methods.calibration import calibration_samples
from infoeval.quant.variant_settings import CalibrationSettings


def load_candidate(gate_settings, model_settings: ModelSettings, ref):
    """The candidate (spec, loaded model, quantization report, the noise floor's model or None): its own
    checkpoint, or the reference's model, with --scheme (infoeval's rounding or a library's, ``hqq:int4-g64``) or
    --recipe applied (infoeval's rounding and recipes as a ``WithVariant``: the model's own weights stay, the
    variant's codes are swapped in for each forward pass); its tokenizer must be the reference's. The floor
    (``--floor`` not off) is the reference's model with the quantized layers' weights moved by one bfloat16
    rounding step (``quant/floor.py``): made from the candidate's own module where the candidate is the reference's
    model (not given, or given and ``same_model``: one model in memory, not two); else from the reference's model,
    loaded beside it."""
    spec = gate_settings.candidate or reference_model_spec(ref.meta["provenance"]["model"])
    device = resolve_device(model_settings.device)
    loaded = load_model(spec, device, resolve_dtype(model_settings.dtype, device), model_settings.device_map)
    spec = loaded.info.spec  # a model object's name
    fp = vocab_fingerprint(loaded.tokenizer)
    if fp != ref.meta["tokenizer_fingerprint"]:
        raise DataError(
            f"the candidate's tokenizer ({spec}) differs from the reference's "
            f"({ref.meta['provenance']['model']['spec']}): vocabularies must be identical to compare distributions"
        )
    shipped = loaded.info.quantization if gate_settings.candidate else None
    quantization = gate_settings.quantization  # --scheme or --recipe, parsed once (gating/settings.py)
    if shipped and shipped["format"] != "gguf" and quantization is not None:
        raise UsageError(
            f"{spell('scheme')} and {spell('recipe')} quantize a float model; '{spec}' is already a "
            f"{shipped['format']} "
            "checkpoint: gate it without them"
        )
    original = loaded.model
    own = gate_settings.candidate is None or same_model(loaded.info, ref.meta["provenance"]["model"])
    report = {"source": "checkpoint", **shipped} if shipped else None  # a --scheme on a GGUF replaces it below
    if quantization is not None:  # built by its spec's handler, as quantize-compare builds its variants
        calibrated = getattr(quantization, "calibrated", False)
        calibration = _calibration(gate_settings.calibration, ref, loaded.tokenizer) if calibrated else None
        variant = handlers.build(quantization, BuildContext(loaded, calibration=calibration))
        loaded, report = dataclasses.replace(loaded, model=runnable(original, variant)), variant.summary()
    if gate_settings.floor == "off":
        floor = None
    elif not own:  # the candidate is a checkpoint of its own: the floor is the reference's model, loaded here
        floor = _reference_floor(gate_settings, ref, original)
    else:  # the reference's own model (by name or by its weights' digest): the floor from its weights, not a copy;
        # the layers the candidate changed (the default ones when it changed none)
        changed = [r["name"] for r in (report or {}).get("layers", []) if r.get("action") == "quantized"] or None
        floor = WithVariant(original, build_floor(original, seed=gate_settings.floor_seed, layers=changed))
    return spec, loaded, report, floor


def _reference_floor(gate_settings, ref, candidate: torch.nn.Module):
    """The floor of a candidate that is a checkpoint of its own: the reference's model, loaded on the candidate's
    device and dtype (one more model in memory), its default layers moved."""
    spec = reference_model_spec(ref.meta["provenance"]["model"])
    device = next(candidate.parameters()).device
    dtype = next((p.dtype for p in candidate.parameters() if p.dtype.is_floating_point), torch.float32)
    try:
        model = load_model(spec, device, dtype).model
    except InfoevalError as e:
        raise DataError(
            f"the noise floor needs the reference's model ({spec}), which did not load ({e}); pass {spell('floor')} off"
        ) from None
    return WithVariant(model, build_floor(model, seed=gate_settings.floor_seed))


def _calibration(settings, ref, tokenizer):
    """A calibrated method's chunks, held out from the reference's tokens (the reference file's text is read again
    where it is here unchanged; else a --calibration text is needed)."""
    provenance = ref.meta["provenance"]
    evaluated = reread_text(provenance["text"], (provenance.get("protocol") or {}).get("name", DEFAULT_PROTOCOL))
    return calibration_samples(
        settings or CalibrationSettings(),
        evaluated,
        ref.stream_ids.numpy(),
        bytes_read(ref, evaluated, tokenizer),
        tokenizer,
    )


def bytes_read(ref, evaluated, tokenizer) -> int:
    """The UTF-8 bytes of ``evaluated`` (from its start) that the reference's windows read, context included: its
    stream's text tokens (the stream less its prefix tokens), counted by ``encode`` as the evaluation counted them,
    tokenizing only the part of the text they need. The scored tokens' bytes alone fall short wherever context is
    not scored (llama.cpp's first halves, GPTQ's first tokens): a calibration held out after them would start
    inside the evaluated text."""
    scored = int(ref.nbytes.sum())
    if evaluated is None:
        return scored
    ids = ref.stream_ids.numpy()
    prefix = (ref.meta["provenance"].get("protocol") or {}).get("prefix_id")
    n_text = ids.size - (int(np.count_nonzero(ids == prefix)) if prefix is not None else 0)
    return max(scored, int(encode(evaluated.text, tokenizer, None, n_text).nbytes.sum()))


def same_model(info, reference: dict) -> bool:
    """Whether a loaded candidate is the reference's own model: the same weights (sha256), or the same hub revision."""
    if info.sha256 is not None and info.sha256 == reference.get("sha256"):
        return True
    return (
        info.kind == "hub"
        and info.revision is not None
        and (info.spec, info.revision)
        == (
            reference.get("spec"),
            reference.get("revision"),
        )
    )


def reference_model_spec(info: dict) -> str:
    """How to load the reference's own model again: built-in names and hub ids as given, files by absolute path."""
    if info["spec"].lower() in BUILTIN or info.get("kind") == "hub" or not info.get("path"):
        return info["spec"]
    return info["path"]
