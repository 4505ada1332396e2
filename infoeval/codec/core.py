"""Bytes ⇄ an ``Archive`` with a loaded model: the library under ``compress``, ``decompress`` and
``compress-bits --verify-coding``.

Encoding: check that the tokenizer gives the bytes back (``segments.tokenize_exactly``; otherwise xz, or a
refusal), cut the ids into segments of ``ctx`` tokens and groups of ``group`` segments, code each group
(``stepping.encode_group``) and record in the header what exactness depends on (``environment``). Decoding:
check each stream's crc32, decode each group with the threads recorded, check each segment's token crc32 and
the original's sha256.
"""

from __future__ import annotations

import contextlib
import hashlib
import lzma
import time
from dataclasses import dataclass

import numpy as np
import torch

from infoeval.codec import environment, segments, stepping
from infoeval.codec.container import Archive, BadFile, DamagedPayload, ids_crc
from infoeval.codec.frequencies import PRECISION, bucket_width
from infoeval.errors import DataError, UsageError, counted, spell
from infoeval.input.prepare import Reporter, progress

FALLBACKS = ("xz", "refuse")


@dataclass(frozen=True)
class Coding:
    """What encoding cost: tokens, Σ −log₂ q (ideal) and Σ −log₂(f/M) (code) bits, stream bits, seconds."""

    tokens: int
    ideal_bits: float
    code_bits: float
    stream_bits: int
    seconds: float


def _header(raw: bytes, tokens: int, loaded, device, ctx: int, group: int, start_id: int, load_as: str) -> dict:
    env = environment.environment(loaded, device, torch.get_num_threads())
    return {
        "mode": "model",
        "original": {"bytes": len(raw), "sha256": hashlib.sha256(raw).hexdigest()},
        "model": {"load": load_as, "spec": loaded.info.spec, "kind": loaded.info.kind},
        "tokens": tokens,
        "ctx": ctx,
        "group": group,
        "start_id": start_id,
        "bucket": bucket_width(env["vocab"]),
        "precision": PRECISION,
        "exactness": env,
    }


def _fallback(raw: bytes, reason: str, fallback: str) -> tuple[Archive, Coding]:
    if fallback != "xz":
        raise DataError(
            f"{reason}; it cannot be coded with this model's tokens ({spell('fallback')} xz stores it with xz)"
        )
    t0 = time.perf_counter()
    stream = lzma.compress(raw, format=lzma.FORMAT_XZ, preset=9)
    header = {
        "mode": "xz",
        "reason": reason,
        "original": {"bytes": len(raw), "sha256": hashlib.sha256(raw).hexdigest()},
    }
    return Archive(header, (stream,), (0,)), Coding(
        0, float("nan"), float("nan"), 8 * len(stream), time.perf_counter() - t0
    )


def encode_bytes(
    raw: bytes,
    loaded,
    device,
    ctx: int,
    group: int,
    load_as: str,
    fallback: str = "xz",
    reporter: Reporter | None = None,
) -> tuple[Archive, Coding]:
    """The archive of ``raw`` coded with the loaded model, and what it cost."""
    reporter = reporter or Reporter()
    reporter.stage("tokenizing")
    tok = segments.tokenize_exactly(raw, loaded.tokenizer)
    if tok.ids is None:
        return _fallback(raw, tok.reason, fallback)
    limit = getattr(loaded.model.config, "max_position_embeddings", None)
    if limit and ctx > limit:
        raise UsageError(
            f"{spell('ctx')} {ctx} is longer than the model's {limit} positions; give {spell('ctx')} ≤ {limit}"
        )
    info = loaded.info.tokenizer
    header = _header(
        raw, len(tok.ids), loaded, device, ctx, group, segments.start_token(info.bos_id, info.eos_id), load_as
    )
    segs = segments.split(tok.ids, ctx)
    runs = segments.groups(len(segs), group)
    streams, crcs, ideal, code = [], [], 0.0, 0.0
    t0 = time.perf_counter()
    with progress(reporter, sum(len(segs[r[0]]) for r in runs), f"compressing {counted(len(tok.ids), 'token')}") as bar:
        for run in runs:
            data, coded = stepping.encode_group(
                loaded.model, [segs[i] for i in run], header["start_id"], header["exactness"]["vocab"], bar.step
            )
            streams.append(data)
            crcs.append(ids_crc(coded.tokens))
            ideal, code = ideal + float(coded.ideal_bits.sum()), code + float(coded.code_bits.sum())
    archive = Archive(header, tuple(streams), tuple(crcs))
    return archive, Coding(len(tok.ids), ideal, code, 8 * sum(map(len, streams)), time.perf_counter() - t0)


def _segment_names(ids: list[int]) -> str:
    return f"segment{'s' if len(ids) > 1 else ''} {', '.join(map(str, ids))}"


@contextlib.contextmanager
def threads(n: int):
    """torch's intra-op threads set to ``n`` inside the block."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _decode_groups(archive: Archive, loaded, reporter: Reporter) -> list[np.ndarray]:
    h = archive.header
    lengths = archive.lengths()
    runs = [archive.group_segments(g) for g in range(len(archive.streams))]
    out: list[np.ndarray] = []
    with (
        threads(int(h["exactness"]["threads"])),
        progress(reporter, sum(lengths[r[0]] for r in runs), "decompressing") as bar,
    ):
        for g, run in enumerate(runs):
            try:
                coded = stepping.decode_group(
                    loaded.model,
                    archive.streams[g],
                    [lengths[i] for i in run],
                    int(h["start_id"]),
                    int(h["exactness"]["vocab"]),
                    bar.step,
                )
            except stepping.OutOfVocabulary as e:
                raise DamagedPayload(
                    f"{_segment_names([run[int(i)] for i in e.rows])} decoded to tokens the model "
                    f"does not have: the file does not decode here"
                ) from None
            if ids_crc(coded.tokens) != archive.token_crcs[g]:
                raise DamagedPayload(
                    f"{_segment_names(list(run))} (of {len(lengths)}) decoded to other tokens than were "
                    f"coded (their checksum differs): the file does not decode here"
                )
            out += list(coded.tokens)
    return out


def decode_archive(archive: Archive, crcs: tuple[int, ...], loaded, reporter: Reporter | None = None) -> bytes:
    """The original bytes, checked against every checksum; ``loaded`` may be None for files that need no model."""
    reporter = reporter or Reporter()
    damaged = archive.damaged_groups(crcs)
    if damaged:
        names = [i for g in damaged for i in archive.group_segments(g)] if archive.header["mode"] == "model" else []
        raise DamagedPayload(
            f"the payload is damaged: stream {damaged[0]} fails its checksum"
            + (f" ({_segment_names(names)} cannot be decoded)" if names else "")
        )
    if archive.header["mode"] == "xz":
        try:
            raw = lzma.decompress(archive.streams[0])
        except lzma.LZMAError as e:
            raise DamagedPayload(f"the xz payload cannot be decompressed: {e}") from None
    else:
        expected = len(segments.groups(len(archive.lengths()), int(archive.header["group"])))
        if expected != len(archive.streams):
            raise BadFile(f"the header implies {expected} groups, the table has {len(archive.streams)}")
        ids = _decode_groups(archive, loaded, reporter) if archive.streams else []
        raw = segments.decode_ids(loaded.tokenizer, np.concatenate(ids)) if ids else b""
    original = archive.header["original"]
    if len(raw) != original["bytes"] or hashlib.sha256(raw).hexdigest() != original["sha256"]:
        raise DamagedPayload("the decoded bytes differ from the original (sha256 mismatch); nothing was written")
    return raw
