"""Layer-major passes (``engine/streaming.py``): the model read one decoder layer at a time, over every window, gives
the ordinary forward's last hidden states and per-position NLL, on tiny Llama, Qwen3, Mistral-style (a sliding
window shorter than the context) and Gemma-style (scaled embeddings, alternating sliding layers, a soft-capped head)
models, in float32 and bfloat16; the checkpoint is read once per pass, and what cannot be streamed is refused."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from tiny_models import _save, make_tokenizer

from infoeval import engine
from infoeval.comparison.lockstep import REFERENCE, run_lockstep
from infoeval.comparison.reference_first import reference_states
from infoeval.engine.stream_layout import FASTEST, StreamLayout, moved
from infoeval.engine.streaming import StreamedModel, last_states
from infoeval.errors import RuntimeFailure, UsageError
from infoeval.input.prepare import Reporter, prepare
from infoeval.input.settings import ModelSettings, TextSettings, WindowSettings

CTX = 64


def _tiny(folder, model_class: str, config_class: str, seed: int, **shape):
    """A tiny transformers model of ``model_class`` with the 512-token BOS tokenizer, saved into ``folder``."""
    import transformers

    tok = make_tokenizer(bos=True)
    config = getattr(transformers, config_class)(
        vocab_size=len(tok),
        max_position_embeddings=512,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        **shape,
    )
    torch.manual_seed(seed)
    return _save(getattr(transformers, model_class)(config), tok, folder)


SMALL = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=2, num_key_value_heads=1)
TINY = {
    # two Mistral layers with a 16-token sliding window: the mask differs from the causal one inside a window
    "mistral": (
        "MistralForCausalLM",
        "MistralConfig",
        1,
        dict(
            SMALL,
            hidden_size=48,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=96,
            head_dim=12,
            sliding_window=16,
        ),
    ),
    # Gemma 2: sliding, full, sliding layers (a 16-token window), scaled embeddings, soft-capped attention and head,
    # tied embeddings
    "gemma2": (
        "Gemma2ForCausalLM",
        "Gemma2Config",
        2,
        dict(SMALL, head_dim=16, sliding_window=16, final_logit_softcapping=2.0),
    ),
    # Gemma 3's text model: two rotary bases (local and global layers get different position embeddings), q/k norms
    "gemma3": (
        "Gemma3ForCausalLM",
        "Gemma3TextConfig",
        3,
        dict(
            SMALL,
            head_dim=16,
            sliding_window=16,
            layer_types=["sliding_attention", "sliding_attention", "full_attention"],
        ),
    ),
}


@pytest.fixture(scope="module")
def text_file(tmp_path_factory, tiny_text):
    path = tmp_path_factory.mktemp("text") / "tiny.txt"
    path.write_text(tiny_text, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def folders(tmp_path_factory, tiny_llama_dir, tiny_qwen3_dir):
    root = tmp_path_factory.mktemp("streamed")
    return {
        "llama": tiny_llama_dir,
        "qwen3": tiny_qwen3_dir,
        **{
            name: _tiny(root / name, model, config, seed, **shape)
            for name, (model, config, seed, shape) in TINY.items()
        },
    }


def _prepared(folder, text_file, dtype: str):
    return prepare(
        ModelSettings(str(folder), "cpu", dtype),
        TextSettings(text=text_file, max_tokens=5 * CTX),
        WindowSettings(ctx=CTX),
        Reporter(),
    )


def _streamed(p, folder, dtype: str, layout=FASTEST):
    streamed = StreamedModel(folder, getattr(torch, dtype), torch.device("cpu"), layout=layout)
    layers = []
    out = last_states(
        streamed, p.stream.ids, engine.plan(p.windows), p.protocol.prefix_id, on_layer=lambda: layers.append(1)
    )
    states, head = out["reference"]
    return states, head, streamed, len(layers)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("arch", ["llama", "qwen3", "mistral", "gemma2", "gemma3"])
def test_the_streamed_pass_gives_the_forward_passes_states_and_nll(folders, text_file, tmp_path, arch, dtype):
    p = _prepared(folders[arch], text_file, dtype)
    states, head, streamed, layers = _streamed(p, folders[arch], dtype)
    assert layers == p.loaded.model.config.num_hidden_layers and len(p.windows) == 5
    # the states the model's own forward gives (reference-first's pass), bit for bit
    expected = reference_states(p, None, engine.Clock(), str(tmp_path))
    assert states.shape == expected.shape and np.array_equal(states, expected)
    # and the NLL of every scored position, through the same reducer as the ordinary lockstep's
    ordinary = run_lockstep(p.loaded.model, p.stream, p.windows, bos_id=p.protocol.prefix_id)
    from_states = run_lockstep(
        None, p.stream, p.windows, bos_id=p.protocol.prefix_id, stored={REFERENCE: (states, head)}
    )
    assert np.max(np.abs(from_states.reference["nll"] - ordinary.reference["nll"])) <= 1e-5
    assert from_states.reference["nll"].shape == ordinary.reference["nll"].shape


def test_the_checkpoint_is_read_once_per_pass(folders, text_file):
    p = _prepared(folders["qwen3"], text_file, "float32")
    _, _, streamed, _ = _streamed(p, folders["qwen3"], "float32")
    stored = sum(t.numel() * t.element_size() for t in p.loaded.model.state_dict().values())
    assert streamed.reads.bytes == stored  # embeddings, each layer, the norm and the head: each once
    assert streamed.reads.read_s > 0 and streamed.reads.compute_s > 0
    assert all(t.device.type == "meta" for t in streamed.model.model.layers.parameters())  # every layer freed


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_no_layout_changes_a_bit_or_the_bytes_read(folders, text_file, dtype):
    p = _prepared(folders["gemma2"], text_file, dtype)  # masks of two kinds, given to every layer
    ahead, _, read_ahead, _ = _streamed(p, folders["gemma2"], dtype)
    inline, _, read_inline, _ = _streamed(p, folders["gemma2"], dtype, StreamLayout(read_ahead=False))
    parked, _, _, _ = _streamed(p, folders["gemma2"], dtype, StreamLayout(parked=True))  # on the host: a no-op move
    assert np.array_equal(ahead, inline) and np.array_equal(ahead, parked)
    assert read_ahead.reads.bytes == read_inline.reads.bytes > 0
    assert read_inline.reads.wait_s == 0.0 and read_ahead.reads.wait_s >= 0.0


def test_a_read_ahead_layer_is_read_into_the_memory_the_layer_before_it_left(text_file, tmp_path):
    shape = dict(hidden_size=32, num_hidden_layers=6, num_attention_heads=2, num_key_value_heads=1)
    folder = _tiny(tmp_path / "deep", "MistralForCausalLM", "MistralConfig", 3, intermediate_size=64, **shape)
    p = _prepared(folder, text_file, "float32")
    made, states = [], []
    for layout, direct in ((FASTEST, False), (StreamLayout(read_ahead=False), True)):
        streamed = StreamedModel(folder, torch.float32, torch.device("cpu"), layout=layout)
        assert streamed.files.direct is False  # a tiny model: through the page cache
        streamed.files.direct = direct  # as for a model larger than memory: past it (the same bytes)
        states.append(last_states(streamed, p.stream.ids, engine.plan(p.windows), p.protocol.prefix_id)["reference"][0])
        assert not streamed.arenas._all  # let go after the last layer
        made.append(streamed.arenas.made)
    # 6 layers: read ahead, layer i + 1 goes into layer i - 1's memory (two arenas); read inline, into one
    assert made == [2, 1] and len(streamed.decoder.layers) == 6
    assert np.array_equal(states[0], states[1])


def test_moving_given_inputs_moves_a_shared_tensor_once_and_keeps_the_structure():
    mask, cos, sin = torch.ones(1, 1, 4, 4), torch.zeros(1, 4, 8), torch.zeros(1, 4, 8)
    given = [((), {"attention_mask": mask, "position_embeddings": (cos, sin), "use_cache": False})] * 3
    out = moved(given, torch.device("meta"), memo := {})
    assert type(out) is list and all(type(args) is tuple and type(kw) is dict for args, kw in out)
    assert {id(kw["attention_mask"]) for _, kw in out} == {id(out[0][1]["attention_mask"])}  # one copy for 3 layers
    assert out[0][1]["attention_mask"].device.type == "meta" and out[2][1]["position_embeddings"][1].is_meta
    assert out[1][1]["use_cache"] is False and len(memo) == 3
    assert moved(mask, torch.device("cpu")) is mask  # already there: not copied


def test_a_read_that_fails_ahead_fails_the_pass(folders, text_file, monkeypatch):
    p = _prepared(folders["qwen3"], text_file, "float32")
    streamed = StreamedModel(folders["qwen3"], torch.float32, torch.device("cpu"))
    real, calls = streamed.files.read, []

    def failing(names, *args):
        calls.append(names)
        if len(calls) == 3:  # the read of layer 1, made in the reader thread while layer 0 runs
            raise RuntimeFailure("the disk went away")
        return real(names, *args)

    monkeypatch.setattr(streamed.files, "read", failing)
    with pytest.raises(RuntimeFailure, match="the disk went away"):
        last_states(streamed, p.stream.ids, engine.plan(p.windows), p.protocol.prefix_id)


def test_a_tied_head_is_read_from_the_embeddings(folders, text_file):
    p = _prepared(folders["gemma2"], text_file, "float32")
    assert p.loaded.model.config.tie_word_embeddings
    _, head, _, _ = _streamed(p, folders["gemma2"], "float32")
    assert torch.equal(head.weight, p.loaded.model.get_input_embeddings().weight)


def test_a_folder_without_safetensors_is_refused(tmp_path, tiny_llama_dir):
    folder = tmp_path / "bin-model"
    folder.mkdir()
    (folder / "config.json").write_text((tiny_llama_dir / "config.json").read_text(), encoding="utf-8")
    (folder / "pytorch_model.bin").write_bytes(b"")
    with pytest.raises(
        UsageError, match=r"reads a model folder's safetensors .* without safetensors \(pytorch_model.bin\)$"
    ):
        StreamedModel(folder, torch.float32, torch.device("cpu"))


def test_a_sharded_checkpoint_is_read_by_its_index(folders, text_file, tmp_path):
    """A checkpoint saved in shards (model.safetensors.index.json) streams to the same states."""
    from tiny_models import _quiet

    p = _prepared(folders["llama"], text_file, "float32")
    sharded = tmp_path / "sharded"
    with _quiet():
        p.loaded.model.save_pretrained(sharded, max_shard_size="40KB")
    index = json.loads((sharded / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 2
    states, _, _, _ = _streamed(p, sharded, "float32")
    expected, _, _, _ = _streamed(p, folders["llama"], "float32")
    assert np.array_equal(states, expected)


@pytest.mark.parametrize("arch", ["llama", "qwen3", "gemma2"])
def test_streamed_variants_and_floor_equal_the_lockstep(folders, text_file, arch):
    """Schemes, a recipe and the noise floor quantized layer by layer as the pass loads them: every column of the
    lockstep (both models in memory) again, and each variant's report (SQNR, stored bytes) the same."""
    from infoeval.comparison.lockstep import FLOOR
    from infoeval.engine.streaming import Role
    from infoeval.quant.apply import build_variants
    from infoeval.quant.floor import build_floor
    from infoeval.quant.layerwise import LayerwiseFloor, LayerwiseVariant
    from infoeval.quant.recipe import parse_recipe
    from infoeval.quant.variant_settings import parse_schemes

    p = _prepared(folders[arch], text_file, "float32")
    schemes = parse_schemes("int4-g32,int8-channel")
    recipe = parse_recipe(
        {"recipe": {"default": "int4-g32"}, "units": {"*mlp.down_proj": "int8-channel"}}, name="mixed"
    )
    include = ["lm_head"]  # the head quantized too: the variants' heads differ from the reference's
    model, at = p.loaded.model, [1, 3]
    expected = run_lockstep(
        model,
        p.stream,
        p.windows,
        build_variants(model, schemes, [recipe], include, lazy=True),
        p.protocol.prefix_id,
        floor=build_floor(model, include, seed=7),
        floor_at=at,
    )
    streamed = StreamedModel(folders[arch], torch.float32, torch.device("cpu"))
    batches = engine.plan(p.windows)
    layerwise = [LayerwiseVariant(streamed.model, s, include) for s in [*schemes, recipe]]
    floor = LayerwiseFloor(streamed.model, include, seed=7)
    roles = [
        Role(REFERENCE, None, range(len(batches))),
        *[Role(v.name, v, range(len(batches))) for v in layerwise],
        Role(FLOOR, floor, [i for i, b in enumerate(batches) if b.windows[0].index in at]),
    ]
    stored = last_states(streamed, p.stream.ids, batches, p.protocol.prefix_id, roles)
    variants = [v.finished() for v in layerwise]
    got = run_lockstep(
        None, p.stream, p.windows, variants, p.protocol.prefix_id, floor=floor, floor_at=at, stored=stored
    )
    for name, cols in expected.variants.items():
        for key, column in cols.items():
            assert np.allclose(got.variants[name][key], column, rtol=0, atol=1e-6), (name, key)
    for key, column in expected.floor.items():
        assert np.allclose(got.floor[key], column, rtol=0, atol=1e-6), key
    assert np.array_equal(got.reference["nll"], expected.reference["nll"])
    whole = build_variants(model, schemes, [recipe], include, lazy=True)
    assert [v.summary() for v in variants] == [v.summary() for v in whole]
    assert floor.summary() == build_floor(model, include, seed=7).summary()


def test_accelerate_s_disk_offload_gives_the_streamed_pass_s_nll(folders, text_file, tmp_path):
    """The baseline users reach for, accelerate's offload with every layer on disk, through the engine (its inputs
    stay where the offloaded model's hooks take them from): the streamed pass's NLL, and the in-memory model's."""
    from transformers import AutoModelForCausalLM

    p = _prepared(folders["llama"], text_file, "float32")
    states, head, _, _ = _streamed(p, folders["llama"], "float32")
    offloaded = AutoModelForCausalLM.from_pretrained(
        folders["llama"], dtype=torch.float32, device_map="auto", max_memory={"cpu": 10_000}, offload_folder=tmp_path
    ).eval()
    assert set(offloaded.hf_device_map.values()) == {"disk"}
    on_disk = run_lockstep(offloaded, p.stream, p.windows, bos_id=p.protocol.prefix_id)
    stored = run_lockstep(None, p.stream, p.windows, bos_id=p.protocol.prefix_id, stored={REFERENCE: (states, head)})
    assert np.max(np.abs(on_disk.reference["nll"] - stored.reference["nll"])) <= 1e-5
