"""Quantizing split between the ranks (quant/rank_share.py): each rank encodes its share of the layers into its own
buffer, and the variants built from every rank's buffers are bit for bit those one process makes.

Facts checked (the ranks simulated in one process: the exchange itself runs in tests/test_distributed.py under
torchrun, whose outputs equal one process's):
* ``owners`` gives every layer to exactly one rank, the same way every time, balanced as greedy LPT is (no rank
  holds more than the lightest one plus the largest layer), and every rank gets something when there are enough
  layers;
* the buffers' regions never overlap, and an encoding fits the room ``field_sizes`` leaves it;
* with 1, 2 and 3 ranks, for symmetric/asymmetric, channel/grouped (partial last group), 2–8 bits, in float32 and
  bfloat16: every stored field, SQNR and Σw² equal one process's, and a recipe's layers are taken where their
  scheme was shared and encoded here otherwise;
* a weight that is not the tensor the share was made from, or a scheme it was not made with, is not taken;
* without a launcher ``start`` does nothing.
"""

from __future__ import annotations

import pytest
import torch
from variant_checks import same_variants

from infoeval.models import load_model
from infoeval.quant import rank_share
from infoeval.quant.apply import build_variants
from infoeval.quant.recipe import Recipe
from infoeval.quant.schemes import Scheme, parse_scheme, parse_schemes

SCHEMES = parse_schemes("int8-channel,int4-g128,int4-channel,int8-g24-asym,int3-g20,int2-channel-asym,int5-g16,int6-channel")


def _simulated(model, schemes, world: int) -> rank_share.RankShare:
    """What ``start`` builds on every rank, with the ranks' encodings made one after the other here."""
    weights = rank_share.selected_weights(model)
    owner = rank_share.owners({n: w.numel() for n, w in weights.items()}, world)
    placed = rank_share.layouts({n: tuple(w.shape) for n, w in weights.items()}, schemes, owner, world)
    buffers = [torch.empty(n, dtype=torch.uint8) for _, n in placed]
    made = [rank_share.encode_share(weights, schemes, layout, buf) for (layout, _), buf in zip(placed, buffers)]
    return rank_share.RankShare(weights, buffers, [p for p, _ in placed], [m[0] for m in made], [m[1] for m in made])


def test_owners_cover_every_layer_once_and_balance():
    sizes = {f"l{i}": s for i, s in enumerate([7, 7, 3, 3, 3, 9, 1, 1, 12, 5])}
    for world in (1, 2, 3, 4, 16):
        owner = rank_share.owners(sizes, world)
        assert list(owner) == list(sizes) and set(owner.values()) <= set(range(world))
        assert owner == rank_share.owners(dict(sizes), world)
        load = [sum(s for n, s in sizes.items() if owner[n] == r) for r in range(world)]
        assert sum(load) == sum(sizes.values())
        if world <= len(sizes):
            assert min(load) > 0
            assert max(load) <= min(load) + max(sizes.values())
    # worked by hand: 12→0, 9→1, 7→1, 7→0, 5→1, 3→0, 3→1, 3→0, 1→1, 1→0 (a tie goes to rank 0): loads 26 and 25
    expected = {"l8": 0, "l5": 1, "l0": 1, "l1": 0, "l9": 1, "l2": 0, "l3": 1, "l4": 0, "l6": 1, "l7": 0}
    assert rank_share.owners(sizes, 2) == expected


def test_regions_do_not_overlap_and_hold_each_encoding(tiny_llama_dir):
    model = load_model(str(tiny_llama_dir), torch.device("cpu"), torch.float32).model
    weights = rank_share.selected_weights(model)
    owner = rank_share.owners({n: w.numel() for n, w in weights.items()}, 2)
    placed = rank_share.layouts({n: tuple(w.shape) for n, w in weights.items()}, SCHEMES, owner, 2)
    assert sum(len(layout) for layout, _ in placed) == len(weights) * len(SCHEMES)
    for layout, total in placed:
        spans = sorted(span for fields in layout.values() for span in fields.values())
        assert all(a[0] + a[1] <= b[0] for a, b in zip(spans, spans[1:])) and spans[-1][0] + spans[-1][1] <= total
        assert all(off % 64 == 0 for off, _ in spans)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("world", [1, 2, 3])
def test_every_rank_builds_one_process_variants(tiny_llama_dir, dtype, world):
    model = load_model(str(tiny_llama_dir), torch.device("cpu"), dtype).model
    recipe = Recipe((("model.layers.0.*", parse_scheme("int4-g128")), ("model.layers.1.mlp.*", parse_scheme("int3-g64"))),
                    parse_scheme("int8-channel"), {}, "mixed")  # fmt: skip  (int3-g64 is not shared: encoded here)
    alone = build_variants(model, SCHEMES, [recipe])
    share = _simulated(model, SCHEMES, world)
    shared = build_variants(model, SCHEMES, [recipe], ahead=share)
    same_variants(alone, shared)
    for v in shared[: len(SCHEMES)]:  # a shared scheme's layers are views of the ranks' buffers, none copied here
        for pw in v.weights.values():
            assert any(pw.codes.untyped_storage().data_ptr() == b.untyped_storage().data_ptr() for b in share.buffers)


def test_only_the_tensor_and_scheme_it_was_made_from_are_taken(tiny_llama_dir):
    model = load_model(str(tiny_llama_dir), torch.device("cpu"), torch.float32).model
    schemes = parse_schemes("int4-g128")
    share = _simulated(model, schemes, 2)
    name, w = next(iter(rank_share.selected_weights(model).items()))
    assert share.take(name, schemes[0], w) is not None
    assert share.take(name, schemes[0], w.clone()) is None  # another tensor with the same values
    assert share.take(name, parse_scheme("int8-channel"), w) is None
    assert share.take("no.such.layer", schemes[0], w) is None
    share.release()
    assert share.take(name, schemes[0], w) is None


def test_without_a_launcher_nothing_is_shared(tiny_llama_dir, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    loaded = load_model(str(tiny_llama_dir), torch.device("cpu"), torch.float32)
    assert rank_share.start(loaded.model, loaded.info, [Scheme(4, 128)]) is None
