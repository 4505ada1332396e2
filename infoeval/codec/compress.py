"""compress and decompress: a file ⇄ a .iez file, with the model as the probability model of a range coder.

``compress`` loads the model, codes the file (``core.encode_bytes``), decodes the result once in memory to prove
that it decodes here (``verify``, on by default; it also measures decompression), and only then writes the file,
atomically. ``decompress`` reads and checks the file, refuses an environment that differs from the recorded one
(``environment.check``) unless forced, decodes, checks the sha256 and writes atomically. Nothing is ever written
when something fails.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from infoeval.codec import core, environment
from infoeval.codec.container import DamagedPayload, pack, unpack
from infoeval.codec.results import CompressResult, DecompressResult
from infoeval.codec.summary import rate, summarize
from infoeval.errors import DataError, RuntimeFailure, UsageError, counted, spell
from infoeval.input.fields import option
from infoeval.input.prepare import Reporter
from infoeval.input.provenance import provenance
from infoeval.input.settings import DEFAULT_MODEL
from infoeval.models import load_model, native_bfloat16, resolve_device, resolve_dtype
from infoeval.models.files import BUILTIN
from infoeval.output.results import atomic_write_bytes, check_file_option


@dataclass(frozen=True)
class CodecSettings:
    """compress's options: the model, segment length, segments per group, device, dtype, fallback, verify."""

    model: str = option(
        DEFAULT_MODEL, flags=("--model", "-m"), help=f"HF folder, hub id (org/name), .gguf file, or '{DEFAULT_MODEL}'."
    )
    ctx: int = option(
        512, flags=("--ctx",), help="Tokens per segment; each segment is coded on its own, after the start token."
    )
    group: int = option(
        32, flags=("--group",), help="Segments stepped together as one batch (the decoder uses the same groups)."
    )
    device: str = option(
        "cpu", flags=("--device",), help="cpu (exact on the same CPU kind and software), cuda or cuda:N."
    )
    dtype: str = option(
        "auto",
        flags=("--dtype",),
        help="auto (bfloat16 where the device computes it natively, else float32), float32, bfloat16 or float16; "
        "decompress uses the file's.",
    )
    fallback: str = option("xz", help="When the tokenizer cannot give the file back: xz (store it with xz) or refuse.")
    verify: bool = option(
        True,
        flags=("--verify/--no-verify",),
        help="Decode in memory before writing (proves the file decodes here; measures decompression).",
    )

    def __post_init__(self):
        if self.ctx < 1 or self.group < 1:
            raise UsageError(f"{spell('ctx')} {self.ctx} and {spell('group')} {self.group} must both be at least 1")
        if self.fallback not in core.FALLBACKS:
            raise UsageError(
                f"{spell('fallback')} {self.fallback} is not allowed; allowed: {', '.join(core.FALLBACKS)}"
            )


def read_input(path: Path) -> bytes:
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise DataError(f"input file '{path}' does not exist") from None
    except IsADirectoryError:
        raise DataError(f"'{path}' is a folder; give a file") from None


def refuse_overwrite(src: Path, dst: Path, force: bool) -> None:
    if Path(dst).resolve() == Path(src).resolve():
        raise UsageError(f"the output '{dst}' is the input file; give another -o")
    check_file_option(dst, "-o")
    if Path(dst).exists() and not force:
        raise UsageError(f"'{dst}' exists; {spell('force')} overwrites it")


def codec_dtype(dtype: str, device) -> torch.dtype:
    """The dtype the model codes in: ``auto`` is bfloat16 where the device computes it natively (``native_bfloat16``),
    else float32. Each step reads every weight once for a token per segment, so it is bound by the weights' bytes:
    on Qwen3-0.6B's shape a step of one segment took half the time in bfloat16, and on SmolLM2 the coded bits
    moved by 0.05 % (docs/design-notes.md). A file records its dtype; decompress uses it."""
    if dtype.lower() != "auto":
        return resolve_dtype(dtype, device)
    return torch.bfloat16 if native_bfloat16(device) else torch.float32


def load(spec: str, device: str, dtype: str, reporter: Reporter):
    """The model on its device, and the seconds loading took."""
    dev = resolve_device(device)
    reporter.stage(f"loading {spec}")
    t0 = time.perf_counter()
    loaded = load_model(spec, dev, codec_dtype(dtype, dev))
    return loaded, dev, time.perf_counter() - t0


def load_as(info) -> str:
    """How a decoder finds the model again: a built-in name or hub id as given, else the absolute path."""
    return info.spec if info.kind == "hub" or info.spec.lower() in BUILTIN else info.path


def verify(blob: bytes, raw: bytes, loaded, reporter: Reporter) -> float:
    """Decode ``blob`` in memory and compare it with ``raw``; the seconds decoding took."""
    t0 = time.perf_counter()
    try:
        back = core.decode_archive(*unpack(blob), loaded, reporter)
    except DamagedPayload as e:
        raise RuntimeFailure(f"verification failed, nothing written: {e}") from None
    if back != raw:
        raise RuntimeFailure("verification failed, nothing written: the decoded bytes differ from the input")
    return time.perf_counter() - t0


SMALL = 16 << 10  # bytes: below this a file has few segments to step together, and its header weighs


def small_file_note(n: int, header: int, segments: int) -> str:
    """The line a small file gets: why its ratio and speed are poor."""
    return (
        f"a {n:,}-byte file codes poorly: its {header:,}-byte header weighs on the ratio, and its "
        f"{counted(segments, 'segment')} step one token per forward pass of the whole model (a file of 16 KB or more "
        "fills more segments per pass); a smaller --ctx steps more segments at once: faster, but each sees less "
        "context (--ctx 256: 4-10 % more bits on SmolLM2)"
    )


def compress(
    src: Path, dst: Path, codec_settings: CodecSettings, force: bool = False, reporter: Reporter | None = None
) -> CompressResult:
    """Compress ``src`` into ``dst`` (see the module's docstring)."""
    reporter = reporter or Reporter()
    raw = read_input(src)
    refuse_overwrite(src, dst, force)
    loaded, device, load_s = load(codec_settings.model, codec_settings.device, codec_settings.dtype, reporter)
    archive, coding = core.encode_bytes(
        raw,
        loaded,
        device,
        codec_settings.ctx,
        codec_settings.group,
        load_as(loaded.info),
        codec_settings.fallback,
        reporter,
    )
    blob = pack(archive)
    if archive.header["mode"] == "model" and len(raw) < SMALL:
        reporter.note(small_file_note(len(raw), len(blob) - sum(map(len, archive.streams)), len(archive.lengths())))
    verify_s = verify(blob, raw, loaded, reporter) if codec_settings.verify else None
    atomic_write_bytes(Path(dst), blob)
    fields = summarize(raw, blob, archive, coding, verify_s)
    fields["input"] |= {"path": str(src)}
    fields["output"] |= {"path": str(dst)}
    prov = provenance("compress", model=loaded.info, device=str(device))
    return CompressResult(prov, {"load_s": load_s, "compress_s": coding.seconds, "verify_s": verify_s}, **fields)


def _device_of(exactness: dict) -> str:
    return "cpu" if exactness["device"] == "cpu" else exactness["device"].split(":")[0]


def decompress(
    src: Path, dst: Path, model: str | None = None, force: bool = False, reporter: Reporter | None = None
) -> DecompressResult:
    """Decompress ``src`` into ``dst`` (see the module's docstring)."""
    reporter = reporter or Reporter()
    data = read_input(src)
    archive, crcs = unpack(data)
    refuse_overwrite(src, dst, force)
    loaded, load_s, forced = None, 0.0, []
    if archive.header["mode"] == "model" and archive.streams:
        env = archive.header["exactness"]
        loaded, device, load_s = load(model or archive.header["model"]["load"], _device_of(env), env["dtype"], reporter)
        forced = environment.check(env, environment.environment(loaded, device, int(env["threads"])), force)
    t0 = time.perf_counter()
    raw = core.decode_archive(archive, crcs, loaded, reporter)
    seconds = time.perf_counter() - t0
    atomic_write_bytes(Path(dst), raw)
    tokens = int(archive.header.get("tokens", 0))
    prov = provenance("decompress", model=loaded.info if loaded else None)
    return DecompressResult(
        prov,
        {"load_s": load_s, "decompress_s": seconds},
        input={"path": str(src), "bytes": len(data)},
        output={"path": str(dst), "bytes": len(raw), "sha256": hashlib.sha256(raw).hexdigest()},
        mode=archive.header["mode"],
        tokens=tokens,
        throughput=rate(len(raw), tokens, seconds),
        forced=tuple(forced),
    )
