"""A mix (module name → scheme) in other tools' vocabularies: llama.cpp's ``--tensor-type`` list and a
compressed-tensors ``config_groups`` block. Pure functions of names, schemes and shapes.

**llama.cpp.** ``llama-quantize --tensor-type-file FILE model-f16.gguf out.gguf TYPE`` reads ``pattern=ggml_type``
entries separated by spaces or newlines (no comments); each pattern is a regular expression searched in the GGUF
tensor name, the first match wins. We write one anchored pattern per tensor, e.g.
``^blk\\.3\\.ffn_down\\.weight$=q8_0``.
GGUF names of Llama-style models: ``model.layers.N.self_attn.{q,k,v,o}_proj`` → ``blk.N.attn_{q,k,v,output}``,
``model.layers.N.mlp.{gate,up,down}_proj`` → ``blk.N.ffn_{gate,up,down}``, ``lm_head`` → ``output``.

ggml types have fixed blocks and their own rounding, so most of our schemes map only approximately:

| scheme                     | ggml type | how close                                                             |
|----------------------------|-----------|-----------------------------------------------------------------------|
| int8-g32                   | Q8_0      | same layout (32 weights, fp16 scale, ±127); rounding may differ       |
| int8-channel, int8-g<N>    | Q8_0      | approximate: blocks of 32 instead of a row or N                       |
| int5-* / int5-*-asym       | Q5_0/Q5_1 | approximate: blocks of 32; Q5_1 stores an fp16 minimum, not a zero point |
| int4-* / int4-*-asym       | Q4_0/Q4_1 | approximate: blocks of 32, Q4_0's grid is −8 … 7 with d = max/−8      |
| int6-*                     | Q6_K      | approximate: super-blocks of 256 (needs a width divisible by 256)     |
| int3-*                     | Q3_K      | approximate: super-blocks of 256 (needs a width divisible by 256)     |
| int2-*                     | Q2_K      | approximate: super-blocks of 256 (needs a width divisible by 256)     |

(llama.cpp falls back to another type when a tensor's width is not a multiple of the type's block, e.g. Q3_K →
Q4_0 for SmolLM2's 576-wide layers; the export lists those tensors.)

**compressed-tensors.** One group per scheme: ``{"targets": [module names], "weights": {"num_bits", "type": "int",
"symmetric", "strategy": "channel" | "group", "group_size", "dynamic": false, "observer": "minmax"}}``, as
``quant/packed.py`` writes for int4. Expressible when every layer's group size divides its width (the format has no
shorter last group); our symmetric codes ±(2^(b−1) − 1) lie inside its range −2^(b−1) … 2^(b−1) − 1.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence

from infoeval.quant.schemes import Scheme

_GGUF_TYPES = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}
_BLOCK = re.compile(r"^(?:model\.)?layers\.(\d+)\.(.+)$")
K_QUANT_BLOCK = 256


def gguf_name(module: str) -> str | None:
    """The GGUF tensor name of a Llama-style module's weight ('model.layers.3.mlp.down_proj' →
    'blk.3.ffn_down.weight'; 'lm_head' → 'output.weight'), None when there is no standard name.

    >>> gguf_name("model.layers.3.mlp.down_proj"), gguf_name("lm_head"), gguf_name("model.layers.0.mlp.foo")
    ('blk.3.ffn_down.weight', 'output.weight', None)
    """
    if module == "lm_head":
        return "output.weight"
    m = _BLOCK.match(module)
    if m and m.group(2) in _GGUF_TYPES:
        return f"blk.{m.group(1)}.{_GGUF_TYPES[m.group(2)]}.weight"
    return None


def ggml_type(scheme: Scheme) -> tuple[str, str]:
    """The nearest ggml type of a scheme and how close it is ("same layout" or "approximate: …").

    >>> ggml_type(Scheme(8, 32)), ggml_type(Scheme(4, 128))[0], ggml_type(Scheme(4, 128, False))[0]
    (('Q8_0', 'same layout (blocks of 32, fp16 scale, ±127); rounding may differ'), 'Q4_0', 'Q4_1')
    """
    b, g, sym = scheme.bits, scheme.group_size, scheme.symmetric
    if b >= 7:
        if g == 32 and sym:
            return "Q8_0", "same layout (blocks of 32, fp16 scale, ±127); rounding may differ"
        return "Q8_0", f"approximate: blocks of 32, symmetric (ours: {scheme.name})"
    if b in (4, 5):
        name = f"Q{b}_{0 if sym else 1}"
        grid = "an fp16 minimum instead of a zero point" if not sym else f"grid −{2 ** (b - 1)} … {2 ** (b - 1) - 1}"
        return name, f"approximate: blocks of 32, {grid} (ours: {scheme.name})"
    return (
        f"Q{b}_K",
        f"approximate: k-quant super-blocks of {K_QUANT_BLOCK} with sub-block scales (ours: {scheme.name})",
    )


def tensor_types(assignment: Mapping[str, Scheme], widths: Mapping[str, int]) -> dict:
    """The llama.cpp export of a mix: ``text`` (the --tensor-type-file contents, one entry per line), the
    ``base_type`` (most common ggml type: the TYPE argument), per-scheme ``mapping`` notes, ``fallback`` tensors
    (width not a multiple of the type's block) and ``unmapped`` modules (no GGUF name; then ``text`` is None)."""
    lines, mapping, fallback, unmapped, counts = [], {}, [], [], {}
    for module, scheme in assignment.items():
        name = gguf_name(module)
        if name is None:
            unmapped.append(module)
            continue
        gtype, note = ggml_type(scheme)
        mapping[scheme.name] = {"ggml_type": gtype, "note": note}
        counts[gtype] = counts.get(gtype, 0) + 1
        block = K_QUANT_BLOCK if gtype.endswith("_K") else 32
        if widths[module] % block:
            fallback.append(f"{name} ({gtype}: width {widths[module]} not a multiple of {block})")
        lines.append(f"^{re.escape(name)}$={gtype.lower()}")
    base = max(counts, key=counts.get) if counts else None
    return {
        "text": None if unmapped else "\n".join(lines) + "\n",
        "base_type": base,
        "mapping": mapping,
        "fallback": fallback,
        "unmapped": unmapped,
        "command": f"llama-quantize --tensor-type-file tensor-types.txt model-f16.gguf model-mix.gguf {base}",
    }


def config_groups(assignment: Mapping[str, Scheme], widths: Mapping[str, int], linears: list[str]) -> dict:
    """The compressed-tensors quantization config of a mix (``config`` None and ``reason`` when a layer's group
    size does not divide its width); Linear layers outside the mix go to ``ignore``."""
    groups: dict[str, dict] = {}
    for module, s in assignment.items():
        if s.group_size is not None and widths[module] % s.group_size:
            return {
                "config": None,
                "reason": f"{module}: group {s.group_size} does not divide its {widths[module]} inputs "
                f"(compressed-tensors has no shorter last group)",
            }
        args = {"num_bits": s.bits, "type": "int", "symmetric": s.symmetric, "dynamic": False, "observer": "minmax"}
        args |= {"strategy": "channel"} if s.group_size is None else {"strategy": "group", "group_size": s.group_size}
        groups.setdefault(
            s.name, {"targets": [], "weights": args, "input_activations": None, "output_activations": None}
        )
        groups[s.name]["targets"].append(module)
    config = {
        "quant_method": "compressed-tensors",
        "format": "pack-quantized",
        "config_groups": {f"group_{i}": g for i, g in enumerate(groups.values())},
        "ignore": [n for n in linears if n not in assignment],
    }
    return {"config": config, "reason": None}


def unit_patterns(kind: str, name: str, layers: Sequence[str], linears: Sequence[str], prefix: str | None) -> list[str]:
    """Recipe globs for a unit: its name (a Linear), ``<block>.*`` (a block) or ``<prefix>.*.<type>`` (a type) when
    that glob matches exactly the unit's layers among the model's Linear layers; else every layer by name.

    >>> unit_patterns("type", "mlp.down_proj", ["model.layers.0.mlp.down_proj", "model.layers.1.mlp.down_proj"],
    ...               ["model.layers.0.mlp.down_proj", "model.layers.1.mlp.down_proj", "lm_head"], "model.layers")
    ['model.layers.*.mlp.down_proj']
    """
    glob = {"linear": name, "block": f"{name}.*", "type": f"{prefix}.*.{name}" if prefix else name}.get(kind, name)
    if sorted(n for n in linears if fnmatch.fnmatchcase(n, glob)) == sorted(layers):
        return [glob]
    return list(layers)
