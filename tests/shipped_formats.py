"""Shipped quantized checkpoints saved the way users save them, from a float model folder: each library's config
through transformers' ``from_pretrained(..., quantization_config=...)`` then ``save_pretrained``; HQQ and quanto
through their own savers (transformers 5 refuses to save them); AutoRound's exports; compressed-tensors through
``infoeval quantize --format pack-quantized``. Used by tests/test_shipped_checkpoints.py and
benchmarks/checkpoints.py. A plain module (``tests`` is not a package).

``SAVERS[name]`` is ``(save(base, out), the infoeval scheme that rounds the same way or None, the library's
in-process scheme or None)``.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from pathlib import Path

import torch


def _tokenizer(base: Path, out: Path) -> None:
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(base).save_pretrained(out)


def _quiet():
    """Warnings and the libraries' bars off; torch's print options restored (AutoRound sets them process-wide)."""
    from infoeval.quant.methods import kept_print_options

    stack = contextlib.ExitStack()
    stack.enter_context(kept_print_options())
    stack.enter_context(warnings.catch_warnings())
    warnings.simplefilter("ignore")
    stack.enter_context(contextlib.redirect_stderr(io.StringIO()))
    stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
    return stack


def save_transformers(base: Path, out: Path, config) -> Path:
    """The float folder loaded with a library's ``quantization_config`` and saved as transformers saves it."""
    from transformers import AutoModelForCausalLM

    with _quiet():
        model = AutoModelForCausalLM.from_pretrained(base, quantization_config=config, dtype=torch.float32)
        model.save_pretrained(out)
    _tokenizer(base, out)
    return out


def bnb(kind: str):
    def save(base: Path, out: Path) -> Path:
        from transformers import BitsAndBytesConfig

        if kind == "int8":
            return save_transformers(base, out, BitsAndBytesConfig(load_in_8bit=True))
        config = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=kind, bnb_4bit_compute_dtype=torch.float32)
        return save_transformers(base, out, config)

    return save


def torchao(kind: str):
    def save(base: Path, out: Path) -> Path:
        from torchao.quantization import Int8WeightOnlyConfig, IntxWeightOnlyConfig
        from torchao.quantization.granularity import PerGroup
        from transformers import TorchAoConfig

        if kind == "int8":
            return save_transformers(base, out, TorchAoConfig(Int8WeightOnlyConfig()))
        group = int(kind.split("-g")[1])
        return save_transformers(
            base, out, TorchAoConfig(IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(group)))
        )

    return save


def hqq(bits: int, group: int):
    def save(base: Path, out: Path) -> Path:
        from hqq.core.quantize import BaseQuantizeConfig
        from hqq.models.hf.base import AutoHQQHFModel
        from transformers import AutoModelForCausalLM

        with _quiet():
            model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
            config = BaseQuantizeConfig(nbits=bits, group_size=group)
            AutoHQQHFModel.quantize_model(model, quant_config=config, compute_dtype=torch.float32, device="cpu")
            AutoHQQHFModel.save_quantized(model, str(out))
        _tokenizer(base, out)
        return out

    return save


def quanto(weights: str):
    def save(base: Path, out: Path) -> Path:
        from optimum.quanto import QuantizedModelForCausalLM, qint4, qint8
        from transformers import AutoModelForCausalLM

        with _quiet():
            model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
            q = QuantizedModelForCausalLM.quantize(
                model, weights={"int4": qint4, "int8": qint8}[weights], exclude="lm_head"
            )
            q.save_pretrained(out)
        _tokenizer(base, out)
        return out

    return save


def autoround(fmt: str, bits: int = 4, group: int = 64, sym: bool = True):
    """AutoRound's round-to-nearest (iters 0) exported in ``fmt``: auto_round, auto_gptq or auto_awq."""

    def save(base: Path, out: Path) -> Path:
        from auto_round import AutoRound
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(base)
        g = torch.Generator().manual_seed(0)
        data = [torch.randint(3, min(len(tok), 500), (1, 32), generator=g) for _ in range(4)]
        with _quiet(), torch.enable_grad():
            model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
            ar = AutoRound(
                model,
                tok,
                bits=bits,
                group_size=group,
                sym=sym,
                iters=0,
                nsamples=4,
                seqlen=32,
                dataset=data,
                amp=False,
                enable_torch_compile=False,
                device_map="cpu",
                seed=0,
            )
            ar.quantize()
            ar.save_quantized(str(out), format=fmt)
        _tokenizer(base, out)
        return out

    return save


def compressed(scheme: str):
    def save(base: Path, out: Path) -> Path:
        from infoeval.gating.checkpoint import quantize_checkpoint
        from infoeval.input.settings import ModelSettings

        quantize_checkpoint(ModelSettings(str(base), "cpu", "float32"), scheme, out, fmt="pack-quantized")
        return out

    return save


SAVERS = {
    "bnb-nf4": (bnb("nf4"), None, "bnb:nf4"),
    "bnb-int8": (bnb("int8"), None, "bnb:int8"),
    "torchao-int8": (torchao("int8"), None, "torchao:int8"),
    "torchao-int4-g64": (torchao("int4-g64"), None, "torchao:int4-g64"),
    "hqq-int4-g64": (hqq(4, 64), None, "hqq:int4-g64"),
    "quanto-int4": (quanto("int4"), None, "quanto:int4"),
    "autoround-int4-g64": (autoround("auto_round"), "int4-g64", "autoround:int4-g64-iters0"),
    "gptq-int4-g64": (autoround("auto_gptq"), "int4-g64", None),
    "awq-int4-g64": (autoround("auto_awq", sym=False), "int4-g64-asym", None),
    "compressed-int4-g64": (compressed("int4-g64"), "int4-g64", None),
}


def library_model(name: str, folder: Path) -> torch.nn.Module:
    """The checkpoint loaded by its library as its documentation says, without infoeval: the model the gate's
    candidate must compute exactly."""
    from transformers import AutoModelForCausalLM

    with _quiet():
        if name.startswith("hqq"):
            from hqq.models.hf.base import AutoHQQHFModel

            return AutoHQQHFModel.from_quantized(str(folder), device="cpu", compute_dtype=torch.float32).eval()
        if name.startswith("quanto"):
            from optimum.quanto import QuantizedModelForCausalLM

            return QuantizedModelForCausalLM.from_pretrained(str(folder))._wrapped.eval()
        if name.startswith(("gptq", "awq")):  # without gptqmodel, AutoRound's kernels read both layouts
            from transformers import AutoRoundConfig

            return AutoModelForCausalLM.from_pretrained(
                folder, dtype=torch.float32, quantization_config=AutoRoundConfig()
            ).eval()
        return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()


GGUF_TYPES = ("Q8_0", "Q5_1", "Q5_0", "Q4_1", "Q4_0")  # what gguf-py quantizes for rows of SmolLM2's 576 inputs


def requantize_gguf(source: Path, out: Path, qtype: str) -> Path:
    """A GGUF file whose transformer blocks' matrices are ``source``'s, dequantized and quantized again to
    ``qtype`` with gguf-py's reference quantizers (llama.cpp's ``llama-quantize --allow-requantize``, in
    Python); every other tensor and every metadata field copied as they are. From the built-in SmolLM2 file
    (Q4_1), whose dequantization is infoeval's float reference, this is a GGUF quantization of that reference."""
    import gguf
    import numpy as np

    reader = gguf.GGUFReader(str(source))
    target = getattr(gguf.GGMLQuantizationType, qtype)
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(str(out), arch)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        value = field.contents()
        if key == "general.file_type":
            value = {"Q8_0": 7, "Q4_0": 2, "Q4_1": 3, "Q5_0": 8, "Q5_1": 9}[qtype]  # llama.cpp's LLAMA_FTYPE_MOSTLY_*
        sub = field.types[1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(key, value, field.types[0], sub_type=sub)
    for t in reader.tensors:
        shape = [int(x) for x in reversed(t.shape)]  # numpy order: rows × row length
        if t.name.startswith("blk.") and len(shape) == 2:
            weights = gguf.quants.dequantize(t.data, t.tensor_type).reshape(shape).astype(np.float32)
            writer.add_tensor(
                t.name, gguf.quants.quantize(weights, target), raw_dtype=target
            )  # bytes: rows × bytes per row
        else:
            quantized = t.tensor_type not in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16)
            writer.add_tensor(
                t.name, np.asarray(t.data).reshape(shape[:-1] + [-1]), raw_dtype=t.tensor_type if quantized else None
            )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out
