"""What exact decoding depends on: recorded in a compressed file's header, compared before decoding.

The decoder must compute, bit for bit, the logits the encoder computed. Both step the same segments in the same
batches through the same code (``stepping``), so what is left is the environment: the weights, the token ids,
the dtype and device, the kernels torch dispatches to (its version and the CPU's vector instructions), the model
code (transformers' version and attention implementation) and the number of threads (which the decoder sets to
the recorded value). A difference in any checked field refuses to decode unless forced.
"""

from __future__ import annotations

from importlib import metadata

import torch

from infoeval.errors import UsageError
from infoeval.models.checkpoints import vocab_fingerprint

CHECKED = (
    "model_sha256",
    "tokenizer",
    "vocab",
    "dtype",
    "device",
    "cpu_capability",
    "torch",
    "transformers",
    "attention",
    "constriction",
)


class EnvironmentMismatch(UsageError):
    """The file was written where decoding may give other numbers (another model, tokenizer, dtype, ...)."""


def device_kind(device: torch.device) -> str:
    """cpu, or the GPU's name (``cuda: NVIDIA H100 80GB HBM3``)."""
    device = torch.device(device)
    return "cpu" if device.type == "cpu" else f"{device.type}: {torch.cuda.get_device_name(device)}"


def logits_width(model) -> int:
    """The number of logits per position (the LM head's rows; the tokenizer may have fewer tokens)."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    weight = getattr(head, "weight", None)
    return int(weight.shape[0]) if weight is not None else int(model.config.vocab_size)


def environment(loaded, device: torch.device, threads: int) -> dict:
    """The record of this process: the loaded model and tokenizer, dtype, device, kernels, versions, threads."""
    import transformers

    info = loaded.info
    return {
        "model_sha256": info.sha256 or info.revision,
        "tokenizer": vocab_fingerprint(loaded.tokenizer),
        "vocab": logits_width(loaded.model),
        "dtype": info.dtype,
        "device": device_kind(device),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "attention": getattr(loaded.model.config, "_attn_implementation", None),
        "constriction": metadata.version("constriction"),
        "threads": threads,
    }


def check(recorded: dict, actual: dict, force: bool) -> list[str]:
    """The checked fields that differ, as 'field: file …, here …'; refused (exit 2) unless ``force``."""
    diffs = [
        f"{k}: file {recorded.get(k)!r}, here {actual.get(k)!r}" for k in CHECKED if recorded.get(k) != actual.get(k)
    ]
    if diffs and not force:
        raise EnvironmentMismatch(
            f"this file decodes exactly only where it was written; {len(diffs)} difference(s): {'; '.join(diffs)} "
            f"(--force tries anyway; a wrong result is then caught by the checksums)"
        )
    return diffs
