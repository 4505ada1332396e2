"""A model's shapes before any weight loads: its config, built on PyTorch's ``meta`` device (tensors with a shape
and a dtype and no storage, as accelerate's ``init_empty_weights`` does), so that a run's memory can be planned
from the parameter counts, the vocabulary and the Linear layers a scheme would quantize.

>>> from transformers import LlamaConfig
>>> s = shape_of_config(LlamaConfig(vocab_size=100, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
...     num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=True), torch.float32)
>>> s.vocab, s.hidden, s.n_parameters == 100 * 16 + 4 * 16 * 16 + 3 * 16 * 32 + 3 * 16, s.head_tied
(100, 16, True, True)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from infoeval.errors import ModelLoadError
from infoeval.models.libraries import transformers_quietly


@dataclass(frozen=True)
class ModelShape:
    """What a plan needs of a model: its parameters (count, bytes in the dtype it will run in), the vocabulary,
    the head's input width, whether the head shares the embeddings' weight, and the model on the meta device
    (for ``selection.plan_layers``: the layers a scheme would quantize, with their shapes)."""

    n_parameters: int
    parameter_bytes: int
    vocab: int
    hidden: int
    head_tied: bool
    dtype: torch.dtype
    meta: torch.nn.Module

    @property
    def head_bytes(self) -> int:
        """The head's weight (vocab × hidden) in the run's dtype."""
        return self.vocab * self.hidden * torch.empty((), dtype=self.dtype).element_size()

    def largest_linear(self) -> int:
        """Elements of the largest Linear weight (the head included)."""
        return max(
            (m.weight.numel() for m in self.meta.modules() if isinstance(m, torch.nn.Linear)),
            default=0,
        )


def shape_of_module(model: torch.nn.Module, dtype: torch.dtype | None = None) -> ModelShape:
    """The shape of a model already built (on any device, ``meta`` included); ``dtype``: the one it will run in
    (default: its first floating parameter's). Parameters shared by two modules (a tied head) count once."""
    params = {id(p): p for p in model.parameters()}.values()
    dtype = dtype or next((p.dtype for p in params if p.is_floating_point()), torch.float32)
    size = torch.empty((), dtype=dtype).element_size()
    nbytes = sum(p.numel() * (size if p.is_floating_point() else p.element_size()) for p in params)
    head = model.get_output_embeddings()
    emb = model.get_input_embeddings()
    if head is None:
        raise ModelLoadError(f"{type(model).__name__} has no output head; a causal language model is needed")
    vocab, hidden = (int(x) for x in head.weight.shape)
    tied = emb is not None and head.weight is emb.weight
    return ModelShape(sum(p.numel() for p in params), nbytes, vocab, hidden, tied, dtype, model)


def shape_of_config(config, dtype: torch.dtype) -> ModelShape:
    """The shape of the causal LM a transformers config describes, built on the meta device (no memory). The model
    code is imported quietly first (``transformers_quietly``): the plan runs before anything loads, so this is
    where a Python caller would otherwise first see the quantization libraries' import-time notices."""
    from transformers import AutoModelForCausalLM

    transformers_quietly()
    with torch.device("meta"):
        try:
            model = AutoModelForCausalLM.from_config(config)
        except ValueError as e:
            raise ModelLoadError(f"cannot plan a {config.model_type} model: {str(e).splitlines()[0]}") from None
    return shape_of_module(model, dtype)


def config_of(spec: str):
    """The transformers config a model spec names (a built-in name or .gguf: its converted folder's; a folder's;
    a hub id's, downloaded alone), without loading any weight."""
    from transformers import AutoConfig

    from infoeval.models.files import cached_sha256, gguf_cache_dir, gguf_file

    gguf = gguf_file(spec)
    if gguf is not None:
        if not gguf.is_file():
            raise ModelLoadError(f"GGUF file '{spec}' does not exist; pass an existing .gguf file")
        return AutoConfig.from_pretrained(gguf_cache_dir(gguf, cached_sha256(gguf)))
    if Path(spec).exists():
        if not (Path(spec) / "config.json").is_file():
            raise ModelLoadError(f"'{spec}' is not a Hugging Face model folder (no config.json)")
        return AutoConfig.from_pretrained(spec)
    return _hub_config(spec)


def _hub_config(repo_id: str):
    """A hub id's config: the local cache first, the hub only when it can be reached (as ``sources.from_hub``
    loads the model), so an offline machine hears it at once rather than after huggingface_hub's retries."""
    from transformers import AutoConfig

    from infoeval.models import _HUB_ID
    from infoeval.models.sources import _hub_reachable

    if not _HUB_ID.match(repo_id):
        raise ModelLoadError(f"model '{repo_id}' is neither an existing file or folder nor a hub id")
    try:
        return AutoConfig.from_pretrained(repo_id, local_files_only=True)
    except OSError:
        if not _hub_reachable():
            raise ModelLoadError(
                f"model '{repo_id}' is not in the Hugging Face cache and the hub cannot be reached"
            ) from None
    return AutoConfig.from_pretrained(repo_id)


def model_shape(spec, dtype: torch.dtype = torch.float32) -> ModelShape:
    """The shape of the model ``spec`` names (``load_model``'s specs; a model object in memory as it is)."""
    from infoeval.models.objects import ModelObject

    if isinstance(spec, ModelObject):
        return shape_of_module(spec.model, dtype)
    return shape_of_config(config_of(spec), dtype)
