"""The hidden-state reference (``reference --format hidden``): per scored position the reference model's last hidden
state (after the final norm), and its head (``models.head``) stored once in the file, or only the head's sha256
when the candidate's own head is to be used. The reference's logits are then that head applied to those states,
exactly the logits the model gave, so a gate against it computes every column as quantize-compare does
(``infotheory.reference_stats`` and ``compare``): KL, reverse KL, TV, top-1 and NLL, exact, not bounds.

Writing it: on the first window the stored head applied to the model's states must give its logits within
``head.MAX_HEAD_ERROR`` (``engine.states.check_head``), else the architecture does more after its head than
``OutputHead`` knows and the file is refused; then the model runs headless (``engine.Headless``: its "logits" are
the states) over every window.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from infoeval import engine
from infoeval.engine.roles import Headless
from infoeval.engine.states import check_head
from infoeval.errors import DataError, UsageError, spell
from infoeval.input.windows import window_inputs
from infoeval.measure.infotheory import Workspace, compare, reference_stats
from infoeval.measure.topk import top_k_probs
from infoeval.models.head import OutputHead, head_of
from infoeval.quant.apply import WithVariant, full_weight
from infoeval.quant.floor import FLOOR

STATES = "the reference model's last hidden states"
HIDDEN_SCHEMA = {"hidden": np.float32, "target_logp": np.float32, "entropy": np.float32}
HEAD_SOURCES = ("stored", "candidate")
EXACT_COLUMNS = ("kl", "tv", "rkl", "top1")
HIDDEN_KEYS = ("hidden_dtype", "hidden_size", "head", "head_sha256", "head_stored")  # the metadata it adds


def hidden_reducer(head: OutputHead):
    """The reference pass's reducer: each window's states (float32), and the reference's log p(target) and entropy
    from the head's logits."""
    workspace = Workspace()

    def reduce(step: engine.Step) -> dict:
        h, targets = step.logits[STATES][0], step.targets[0]
        z = head(h).to(targets.device)
        ref = reference_stats(z, targets, workspace)
        engine.require_finite(ref.entropy, STATES, step.batch)
        return {"hidden": h.float(), "target_logp": -ref.nll, "entropy": ref.entropy}

    return reduce


def hidden_pass(p, on_forward) -> tuple[dict, OutputHead]:
    """The reference pass of a hidden-state reference over ``p``'s windows, its head checked on the first window
    first (``engine.states.check_head``): its columns (``HIDDEN_SCHEMA``) and the reference's head (its tensors,
    not a copy)."""
    model, head = p.loaded.model, head_of(p.loaded.model)
    first = window_inputs(p.stream.ids, p.windows[0], p.protocol.prefix_id)
    check_head(model, head, first, p.loaded.info.architecture, f"{spell('format')} hidden", f"{spell('format')} topk")
    cols = engine.run(
        {STATES: Headless(model)},
        p.stream.ids,
        engine.plan(p.windows),
        p.protocol.prefix_id,
        hidden_reducer(head),
        HIDDEN_SCHEMA,
        p.stream.nbytes,
        on_forward,
    )
    return cols, head


def hidden_meta(head: OutputHead, head_source: str, hidden: np.ndarray) -> dict:
    """The metadata a hidden-state reference adds: its kind, the states' stored dtype (the model's 16-bit dtype,
    which holds them exactly, else float32), the head's settings and sha256, whether the file holds it."""
    dtype = head.weight.dtype if head.weight.dtype in (torch.bfloat16, torch.float16) else torch.float32
    return {
        "kind": "hidden",
        "hidden_dtype": str(dtype).replace("torch.", ""),
        "hidden_size": int(hidden.shape[1]),
        "head": head.settings(),
        "head_sha256": head.digest(),
        "head_stored": head_source == "stored",
    }


def candidate_head(ref, model) -> OutputHead:
    """The head a hidden-state reference's logits are made with: the file's own, else the candidate's, which must
    be the reference's bit for bit (its sha256); a candidate whose head differs is a usage error."""
    if ref.head is not None:
        return ref.head
    head = _variant_head(model) if isinstance(model, WithVariant) else head_of(model)
    if head.digest() == ref.meta["head_sha256"]:
        return head
    want, got = ref.meta["head"]["dtype"], head.settings()["dtype"]
    if want != got:
        raise UsageError(
            f"the reference's head is {want} and the candidate's {got}, and the reference file carries no head: "
            f"give {spell('dtype')} {want}, or write a reference that carries it with `{spell('format')} hidden "
            f"{spell('head')} stored`"
        )
    raise UsageError(
        "the candidate's output head differs from the reference's, and the reference file carries no head: "
        f"write one that does with `infoeval reference MODEL {spell('format')} hidden {spell('head')} stored`"
    )


def _variant_head(model: WithVariant) -> OutputHead:
    """The head a lazily swapped candidate computes with: its model's, with the variant's weight where it has one."""
    head, lin = head_of(model.model), model.model.get_output_embeddings()
    name = next(n for n, m in model.model.named_modules() if m is lin)
    weight = (model.variant.weights if model.variant is not None else {}).get(name)
    return head if weight is None else dataclasses.replace(head, weight=full_weight(weight, head.weight.dtype))


def _exact(z: torch.Tensor, zq: torch.Tensor, targets: torch.Tensor, workspace: Workspace, top_k: int) -> dict:
    """The candidate's columns against the reference's logits ``z``, as quantize-compare computes them."""
    ref = reference_stats(z, targets, workspace)
    cols = compare(ref, zq, targets, workspace)
    out = {"nll": cols["nll"], "kl_lower": cols["kl"], **{k: cols[k] for k in EXACT_COLUMNS}}
    if top_k:
        out["top_ids"], out["top_p"] = top_k_probs(zq, top_k, max_log_prob=cols["max_logq"])
        out["ref_top_ids"], out["ref_top_p"] = top_k_probs(z, top_k, log_normalizer=ref.max + ref.log_sum)
    return out


def exact_gate_reducer(ref, head: OutputHead, candidate: str, top_k: int = 0):
    """The engine's reducer of a gate against a hidden-state reference: per window the reference's logits from its
    states, then the candidate's (and the noise floor's, where it runs) columns against them."""
    workspace, placed = Workspace(), {}

    def reduce(step: engine.Step) -> dict:
        zq, targets, rows = step.logits[candidate][0], step.targets[0], step.batch.rows
        if zq.shape[1] != head.vocab:
            raise DataError(
                f"the candidate has {zq.shape[1]} output logits, the reference {head.vocab}: different vocabularies"
            )
        device = zq.device
        if device not in placed:  # the head moved once to the candidate's logits' device
            placed[device] = head.to(device)
        z = placed[device](ref.hidden[rows])
        out = _exact(z, zq, targets, workspace, top_k)
        if FLOOR in step.logits:
            floor = _exact(z, step.logits[FLOOR][0], targets, workspace, 0)
            out |= {f"{FLOOR}/{k}": v for k, v in floor.items()}
        return out

    return reduce
