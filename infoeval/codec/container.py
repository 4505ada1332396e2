"""The .iez file format (all integers big-endian).

    offset      size            field
    0           8               magic  89 'I' 'E' 'Z' 0D 0A 1A 0A
    8           2               format version (1)
    10          4               h, the header's length
    14          h               header: zlib-deflated UTF-8 JSON: mode ("model" or "xz"), the original's size
                                and sha256, the model, tokens, ctx, segments per group, start token, bucket width
                                and what exactness depends on (``environment``)
    14+h        4               g, the number of groups (coded streams)
                12·g            group table: stream bytes, crc32 of the stream, crc32 of the group's token ids
                4               crc32 of everything above
                Σ stream bytes  payload: the groups' streams, one after the other

The segments are implied: the header's ``tokens`` cut into runs of ``ctx`` (the last one shorter), numbered
from 0; group j holds segments j·G … j·G + G − 1 (G = the header's ``group``), all stepped together and coded in
one stream, so each group decodes on its own (in parallel, if one wants). A short or long file, a bad magic or
version or a damaged header or table is bad input (exit 2); a stream that fails its crc32, or whose tokens fail
theirs, is reported with the numbers of its segments (exit 3).
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass

import numpy as np

from infoeval.errors import DataError, RuntimeFailure

MAGIC = b"\x89IEZ\r\n\x1a\n"
VERSION = 1
_LEAD = struct.Struct(">8sHI")
_COUNT = struct.Struct(">I")
_ROW = struct.Struct(">III")
_CRC = struct.Struct(">I")


class BadFile(DataError):
    """Not a .iez file, an unknown version, a truncated file or a damaged header (exit 2)."""


class DamagedPayload(RuntimeFailure):
    """A stream that fails its checksum, or decodes to tokens that fail theirs (exit 3)."""


def ids_crc(segments) -> int:
    """crc32 of a group's token ids, its segments one after the other, as little-endian int32."""
    crc = 0
    for ids in segments:
        crc = zlib.crc32(np.asarray(ids, dtype="<i4").tobytes(), crc)
    return crc


@dataclass(frozen=True)
class Archive:
    header: dict
    streams: tuple[bytes, ...]  # one per group
    token_crcs: tuple[int, ...]  # crc32 of each group's token ids

    def lengths(self) -> list[int]:
        """Tokens of every segment."""
        n, ctx = int(self.header.get("tokens", 0)), int(self.header.get("ctx", 1))
        return [min(ctx, n - i) for i in range(0, n, ctx)]

    def group_segments(self, group: int) -> range:
        size = int(self.header["group"])
        return range(group * size, min(len(self.lengths()), (group + 1) * size))

    def damaged_groups(self, crcs: tuple[int, ...]) -> list[int]:
        """Groups whose stream fails the crc32 the table gives it."""
        return [g for g, (s, c) in enumerate(zip(self.streams, crcs)) if zlib.crc32(s) != c]


def pack(a: Archive) -> bytes:
    """The bytes of a .iez file."""
    text = json.dumps(a.header, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    header = zlib.compress(text, 9)
    parts = [_LEAD.pack(MAGIC, VERSION, len(header)), header, _COUNT.pack(len(a.streams))]
    parts += [_ROW.pack(len(s), zlib.crc32(s), c) for s, c in zip(a.streams, a.token_crcs, strict=True)]
    head = b"".join(parts)
    return head + _CRC.pack(zlib.crc32(head)) + b"".join(a.streams)


def _need(data: bytes, end: int, what: str) -> None:
    if len(data) < end:
        raise BadFile(f"the file is truncated: {len(data):,} bytes, its {what} needs {end:,}")


def _lead(data: bytes) -> int:
    """The header's length, after checking the magic and the version."""
    if not data or not data.startswith(MAGIC[: min(len(data), len(MAGIC))]):
        raise BadFile("not an infoeval compressed file (no .iez magic at its start)")
    _need(data, _LEAD.size, "fixed-size start")
    _, version, h = _LEAD.unpack_from(data)
    if version != VERSION:
        raise BadFile(f"format version {version} is not supported; this infoeval reads version {VERSION}")
    return h


def _header(blob: bytes) -> dict:
    try:
        header = json.loads(zlib.decompress(blob).decode("utf-8"))
    except (zlib.error, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BadFile(f"the file's header cannot be read: {e}") from None
    if not isinstance(header, dict) or header.get("mode") not in ("model", "xz"):
        raise BadFile("the file's header has no known mode")
    return header


def unpack(data: bytes) -> tuple[Archive, tuple[int, ...]]:
    """The archive in ``data`` and the crc32 the table gives each stream; see the module's docstring."""
    at = _LEAD.size + _lead(data)
    _need(data, at + _COUNT.size, "header")
    (n,) = _COUNT.unpack_from(data, at)
    crc_at = at + _COUNT.size + _ROW.size * n
    _need(data, crc_at + _CRC.size, "group table")
    if zlib.crc32(data[:crc_at]) != _CRC.unpack_from(data, crc_at)[0]:
        raise BadFile("the file's header or group table is damaged (checksum mismatch)")
    header = _header(data[_LEAD.size : at])
    rows = [_ROW.unpack_from(data, at + _COUNT.size + _ROW.size * i) for i in range(n)]
    start = crc_at + _CRC.size
    end = start + sum(r[0] for r in rows)
    _need(data, end, "payload")
    if len(data) > end:
        raise BadFile(f"{len(data) - end:,} unexpected bytes after the payload")
    streams, pos = [], start
    for size, _, _ in rows:
        streams.append(data[pos : pos + size])
        pos += size
    return Archive(header, tuple(streams), tuple(r[2] for r in rows)), tuple(r[1] for r in rows)
