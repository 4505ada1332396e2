"""Layer-major passes: a model read from its safetensors one decoder layer at a time, run over every window at once.

    capture:  the model's own forward on each batch of windows with its decoder layers replaced by recorders:
              the first layer's input (the embeddings, scaled as the model scales them) and what the model gives
              each layer (position embeddings, masks, position ids), as GPTQ's layer pipelines capture them
    layers:   for ℓ = 0 … L−1: layer ℓ's tensors read from the checkpoint (that layer's alone; layer ℓ+1's read in a
              thread meanwhile, into layer ℓ−1's buffers, so that the disk reads overlap the compute),
              h_b = layer_ℓ(h_b, **given_ℓ,b) for every batch b, then the layer freed
    last:     the final norm of each batch's kept positions: the last hidden states, (n, d) over the scored rows,
              with the head (``models.head.OutputHead``) that makes the logits from them

so the model is read once per pass, whatever the number of windows, and the memory of a pass is one layer plus the
windows' hidden states. The rest of the model is a skeleton on the meta device (accelerate's ``init_empty_weights``:
parameters on meta, buffers such as the rotary frequencies real); only the embeddings (during the capture), one
layer, and the final norm and head are ever materialized. Every operation is the model's own, in its order, on the
batches ``engine.plan`` makes, so the states are the ordinary forward's (``tests/test_streaming.py``). An
architecture whose decoder is not a stack of layers between embeddings and a final norm is refused with one line.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from infoeval import distributed
from infoeval.engine.batches import Batch
from infoeval.engine.blocks import decoder
from infoeval.engine.capture import capture
from infoeval.engine.stream_layout import FASTEST, StreamLayout, moved
from infoeval.errors import RuntimeFailure, UsageError, spell
from infoeval.input.windows import window_inputs
from infoeval.models.arenas import Arenas
from infoeval.models.head import OutputHead, head_of
from infoeval.models.skeleton import TensorFiles, place, skeleton, storage_read_bytes
from infoeval.quant.apply import swapped


class StreamedModel:
    """A causal LM as a skeleton and its checkpoint: parts of it materialized when a pass needs them, then freed."""

    def __init__(
        self,
        folder: Path,
        dtype: torch.dtype,
        device: torch.device,
        model: torch.nn.Module | None = None,
        layout: StreamLayout = FASTEST,
    ):
        self.files = TensorFiles.of(Path(folder))
        self.layout = layout
        self.arenas = Arenas()  # the memory a freed layer was read into, for the next layer's reads
        self.home = torch.device("cpu") if layout.parked else device  # where the hidden states wait between layers
        self.model = model if model is not None else skeleton(Path(folder), dtype)
        self.dtype, self.device = dtype, device
        for module in self.model.modules():  # the real buffers (rotary frequencies) where the layers will run
            for name, buffer in module.named_buffers(recurse=False):
                if buffer.device.type != "meta" and buffer.device != device:
                    module._buffers[name] = buffer.to(device)
        try:
            self.decoder = decoder(self.model)
        except RuntimeFailure:
            raise UsageError(
                f"{spell('stream')} layers runs a decoder that is a stack of layers between the embeddings and a final "
                f"norm; {type(self.model).__name__} is not laid out so"
            ) from None
        self.names = {id(m): name for name, m in self.model.named_modules()}
        self.reads = self.files.reads

    def wanted(self, module: torch.nn.Module) -> dict[str, str]:
        """{parameter: the checkpoint's tensor} of ``module`` (a tied head's weight: the embeddings')."""
        prefix = self.names[id(module)]
        wanted = {n: f"{prefix}.{n}" for n, _ in module.named_parameters()}
        if wanted.get("weight") not in self.files.tensors and module is self.model.get_output_embeddings():
            if getattr(self.model.config, "tie_word_embeddings", False):
                wanted["weight"] = f"{self.names[id(self.model.get_input_embeddings())]}.weight"
        return wanted

    def load(self, module: torch.nn.Module, tensors: dict[str, torch.Tensor] | None = None) -> torch.nn.Module:
        """``module``'s parameters: ``tensors`` as read (``files.read(wanted(module))``; emptied, so that freeing the
        module frees them), else read now; cast and placed."""
        tensors = self.files.read(self.wanted(module)) if tensors is None else tensors
        module.load_state_dict(place(tensors, self.dtype, self.device), assign=True)
        tensors.clear()
        return module

    def layers(self):
        """Each decoder layer's tensors as read, in order. With the layout's ``read_ahead`` the next layer is read in a
        thread while the caller runs this one (the disk reads overlap the compute; one layer more in memory). Each is
        read into the memory a layer freed before it (``Arenas``: no page faults, no new memory)."""
        layers = self.decoder.layers
        if not self.layout.read_ahead:
            for layer in layers:
                yield self.files.read(self.wanted(layer), arenas=self.arenas)
            return
        with ThreadPoolExecutor(1, thread_name_prefix="infoeval-read") as reader:
            ahead = reader.submit(self.files.read, self.wanted(layers[0]), None, None, self.arenas)
            for i in range(len(layers)):
                t0 = time.perf_counter()
                tensors = ahead.result()
                self.reads.wait_s += time.perf_counter() - t0
                if i + 1 < len(layers):
                    ahead = reader.submit(self.files.read, self.wanted(layers[i + 1]), None, None, self.arenas)
                yield tensors
                del tensors

    @staticmethod
    def free(module: torch.nn.Module) -> None:
        module.to("meta")


def _materialized(part):
    """A layer's variant with its weights made once for every batch of the pass (not once per forward call)."""
    if part is None:
        return None
    weights = {n: w.materialize() if hasattr(w, "materialize") else w for n, w in part.weights.items()}
    return dataclasses.replace(part, weights=weights)


@dataclass
class Role:
    """A model a streamed pass runs: the reference (``variant`` None) or a variant made layer by layer
    (``quant.layerwise``), on some of the batches (their indices)."""

    name: str
    variant: object | None
    batches: Sequence[int]


def _check_streamable(streamed: StreamedModel, roles: Sequence[Role]) -> str:
    """The head's module name; a variant that quantizes a module outside the decoder layers and the head is refused."""
    head = streamed.names[id(streamed.model.get_output_embeddings())]
    for role in roles:
        for name in role.variant.selected() if role.variant is not None else ():
            if not name.startswith(streamed.decoder.prefix + ".") and name != head:
                raise UsageError(
                    f"{spell('stream')} layers quantizes the decoder layers and the head; {role.name} also selects "
                    f"{name} (leave it out with --exclude)"
                )
    return head


def _run_layer(streamed: StreamedModel, index: int, tensors: dict, roles: Sequence[Role], given, hidden) -> None:
    """Layer ``index`` loaded from its ``tensors``, run over each role's batches (a variant's weights swapped in),
    freed."""
    layer = streamed.load(streamed.decoder.layers[index], tensors)
    del tensors
    prefix = f"{streamed.decoder.prefix}.{index}."
    names = [n for n in streamed.names.values() if n.startswith(prefix)]
    t0 = time.perf_counter()
    for role in roles:
        part = role.variant.part(streamed.model, names) if role.variant is not None else None
        # a library's modules swapped in (``quant.layerwise.ModuleSwap``), or the variant's weights made once
        context = (
            part.swapped(streamed.model) if hasattr(part, "swapped") else swapped(streamed.model, _materialized(part))
        )
        with context:
            for b in role.batches:
                args, kwargs = moved(given[b].layers[index], streamed.device)
                out = layer(moved(hidden[role.name][b], streamed.device), *args, **kwargs)
                hidden[role.name][b] = moved(out[0] if isinstance(out, tuple) else out, streamed.home)
        del part, context  # this role's weights let go before the next role's are made
    streamed.reads.compute_s += time.perf_counter() - t0
    streamed.free(layer)  # its arena read into again (``Arenas``)


def _role_head(streamed: StreamedModel, role: Role, head: OutputHead, head_name: str) -> OutputHead:
    """The head a role computes its logits with: the reference's, or a variant's quantized one where it selects it."""
    part = role.variant.part(streamed.model, [head_name]) if role.variant is not None else None
    if part is None:
        return head
    return dataclasses.replace(head, weight=_materialized(part).weights[head_name])


def _pass(streamed: StreamedModel, stream_ids, batches: list[Batch], bos_id, roles: Sequence[Role], on_layer):
    """The layer-major pass over the roles' batches: ({role: {batch: its rows of last hidden states}}, {role: head})."""
    head_name = _check_streamable(streamed, roles)
    mine = sorted({b for role in roles for b in role.batches})
    embeddings = streamed.load(streamed.model.get_input_embeddings())
    t0 = time.perf_counter()
    given = {
        b: capture(
            streamed, torch.cat([window_inputs(stream_ids, w, bos_id) for w in batches[b].windows]).to(streamed.device)
        )
        for b in mine
    }
    streamed.reads.compute_s += time.perf_counter() - t0
    streamed.free(embeddings)
    for g in given.values():  # parked: into host memory (what every layer is given, once)
        memo = {}
        g.hidden, g.layers = moved(g.hidden, streamed.home, memo), moved(g.layers, streamed.home, memo)
    hidden = {role.name: {b: given[b].hidden for b in role.batches} for role in roles}
    for i, tensors in enumerate(streamed.layers()):
        _run_layer(streamed, i, tensors, roles, given, hidden)
        del tensors
        if on_layer is not None:
            on_layer()
    streamed.arenas.clear()  # the last layers' memory: no more layers to read
    norm = streamed.load(streamed.decoder.norm)
    streamed.load(streamed.model.get_output_embeddings())
    head, rows, heads = head_of(streamed.model), {}, {}
    t0 = time.perf_counter()
    for role in roles:
        rows[role.name] = {}
        for b, h in hidden[role.name].items():
            keep = batches[b].keep
            kept = moved(h[:, slice(-keep, None) if isinstance(keep, int) else keep.to(h.device), :], streamed.device)
            rows[role.name][b] = norm(kept).float().reshape(-1, kept.shape[-1]).cpu().numpy()
        heads[role.name] = _role_head(streamed, role, head, head_name)
    streamed.reads.compute_s += time.perf_counter() - t0
    return rows, heads


@torch.inference_mode()
def last_states(
    streamed: StreamedModel,
    stream_ids: torch.Tensor,
    batches: list[Batch],
    bos_id: int | None,
    roles: Sequence[Role] = (),
    on_layer=None,
) -> dict[str, tuple[np.ndarray, OutputHead]]:
    """{role: (its last hidden states after the final norm, float32 (n, d) over every scored row of ``batches``,
    zero on the rows of the batches it does not run; its head)} by one layer-major pass; ``roles`` (default: the
    reference alone, named "reference"). ``on_layer()`` after each layer. Under a launcher each rank runs its share
    of the batches (``distributed.shard``) and every rank gets every rank's rows; a rank's failure stops them all."""
    roles = list(roles) or [Role("reference", None, range(len(batches)))]
    ids = list(range(len(batches)))
    mine = set(distributed.shard(ids)) if distributed.launched() else set(ids)
    roles = [dataclasses.replace(r, batches=[b for b in r.batches if b in mine]) for r in roles]
    error, rows, heads, before = None, {}, {}, storage_read_bytes()
    try:
        rows, heads = _pass(streamed, stream_ids, batches, bos_id, roles, on_layer)
        after = storage_read_bytes()
        if before is not None and after is not None:
            streamed.reads.storage_bytes = (streamed.reads.storage_bytes or 0) + after - before
    except Exception as e:  # noqa: BLE001  (under a launcher every rank must reach the gather)
        if not distributed.launched():
            raise
        error = e
    parts = [rows]
    if distributed.launched():
        parts = distributed.gather([rows], error, counted=False)
        parts = [p for rank in parts for p in rank]
    n = batches[-1].rows.stop if batches else 0
    d = streamed.model.get_input_embeddings().weight.shape[-1]
    out = {}
    for role in roles:
        states = np.zeros((n, d), np.float32)
        for part in parts:
            for b, values in part.get(role.name, {}).items():
                states[batches[b].rows] = values
        out[role.name] = (states, heads[role.name])
    return out
