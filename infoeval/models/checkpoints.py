"""Saved checkpoints as variants of a run (``quantize-compare --checkpoints``): each folder, ``.gguf`` file or hub
id loaded beside the reference, on its device and in its dtype, checked to share its tokenizer (the same token ids,
as a gate checks its candidate), and run as one more variant in the same lockstep on the same windows.

Memory: a checkpoint's tensors that equal the reference's bit for bit (the embeddings and norms a quantizer leaves
as they are) are replaced by the reference's own, so a checkpoint costs about its quantized layers, as a scheme's
variant does.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import torch

from infoeval.errors import UsageError, spell
from infoeval.models.objects import ModuleVariant


def vocab_fingerprint(tokenizer) -> str:
    """sha256 of the token → id map and the special token ids: equal fingerprints mean equal token ids."""
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    special = {k: getattr(tokenizer, k, None) for k in ("bos_token_id", "eos_token_id", "unk_token_id", "pad_token_id")}
    return hashlib.sha256(json.dumps([vocab, special], ensure_ascii=False).encode()).hexdigest()


@dataclass(frozen=True, eq=False)
class CheckpointVariant(ModuleVariant):
    """A saved checkpoint run as a variant: its model, and what it is (``info``: the loaded model's record, with a
    shipped checkpoint's format and stored bits)."""

    info: object = None
    shared_bytes: int = 0  # bytes of its tensors replaced by the reference's equal ones

    def summary(self) -> dict:
        q = self.info.quantization or {}
        scheme = {
            "name": self.name,
            "kind": "checkpoint",
            "format": q.get("format"),
            "bits": q.get("bits"),
            "group_size": q.get("group_size"),
            "symmetric": q.get("symmetric"),
            "library": q.get("library"),
            "library_version": q.get("library_version"),
        }
        return {
            "scheme": scheme,
            "layers_quantized": q.get("layers_quantized"),
            "layers_skipped": q.get("layers_skipped"),
            "params_quantized": q.get("params_quantized"),
            "stored_bytes": q.get("stored_bytes"),
            "bits_per_weight": q.get("bits_per_weight"),
            "bits_source": q.get("bits_source"),
            "shared_bytes": self.shared_bytes,
            "checkpoint": self.info.to_json(),
        }


def load_checkpoints(checkpoints, loaded, device_map=None) -> list[CheckpointVariant]:
    """Each checkpoint (``quant.variant_settings.Checkpoint``: its source and name) loaded on the reference's device
    and in its dtype, its tokenizer checked against the reference's, its tensors equal to the reference's shared with
    them."""
    from infoeval.models import load_model
    from infoeval.models.objects import weights_of

    device, dtype = weights_of(loaded.model)
    reference = vocab_fingerprint(loaded.tokenizer)
    out = []
    for checkpoint in checkpoints:
        spec, name = checkpoint.source, checkpoint.name
        model = load_model(spec, device, dtype, device_map)
        if vocab_fingerprint(model.tokenizer) != reference:
            raise UsageError(
                f"{spell('checkpoints')}: the tokenizer of '{spec}' differs from the reference's ({loaded.info.spec}); "
                "a checkpoint must share the reference's token ids to compare distributions"
            )
        out.append(
            CheckpointVariant(
                name, model.model, model.tokenizer, info=model.info, shared_bytes=share_equal(model.model, loaded.model)
            )
        )
    return out


@torch.no_grad()
def share_equal(model: torch.nn.Module, reference: torch.nn.Module) -> int:
    """Replace each plain parameter of ``model`` that equals the reference's of the same name (same shape, dtype,
    device, values) by the reference's own; returns the bytes freed."""
    ref = dict(reference.named_parameters(remove_duplicate=False))
    freed, seen = 0, set()
    for full, param in list(model.named_parameters(remove_duplicate=False)):
        other = ref.get(full)
        if (
            other is None
            or other is param
            or type(param) is not torch.nn.Parameter
            or type(other) is not torch.nn.Parameter
        ):
            continue
        if (
            param.shape != other.shape
            or param.dtype != other.dtype
            or param.device != other.device
            or not torch.equal(param, other)
        ):
            continue
        owner, _, leaf = full.rpartition(".")
        setattr(model.get_submodule(owner) if owner else model, leaf, other)
        freed += 0 if id(param) in seen else param.numel() * param.element_size()
        seen.add(id(param))
    return freed
