"""The compact reference file: safetensors tensors + JSON metadata, self-validating.

Tensors (n = scored positions, K = top-K, S = tail samples, L = stream tokens, W = windows):

| name          | shape   | dtype            | content                                                    |
|---------------|---------|------------------|------------------------------------------------------------|
| top_ids       | (n, K)  | uint16 or int32  | the reference's K most likely tokens, most likely first    |
| top_logp      | (n, K)  | float16          | their log-probabilities (nats)                             |
| tail_logmass  | (n,)    | float32          | ln of the probability outside the top-K (−inf if none)     |
| tail_ids      | (n, S)  | uint16 or int32  | tokens drawn from p restricted to the tail (seeded)        |
| tail_logp     | (n, S)  | float16          | their log-probabilities                                    |
| target_ids    | (n,)    | int32            | the observed next token                                    |
| target_logp   | (n,)    | float32          | its log-probability under the reference                    |
| entropy       | (n,)    | float32          | H(p) in nats, over the full vocabulary                     |
| nbytes        | (n,)    | int32            | UTF-8 bytes of the text the scored token covers            |
| stream_ids    | (L,)    | int32            | every token id the windows read (prefix token included)    |
| windows       | (W, 6)  | int64            | index, start, length, first_scored, n_scored, replace_bos  |

Ids are uint16 when the vocabulary has at most 65,536 entries. For SmolLM2 (V = 49,152) one position costs
64·(2+2) + 128·(2+2) + 16 = 784 bytes, 0.8 % of llama.cpp's 2·V = 98,304 bytes.

A hidden-state reference (``kind`` "hidden" in the metadata; ``gating/hidden.py``) holds instead of the five
compact tensors the states, and the head unless the candidate's is to be used (d = the head's input width):

| name          | shape   | dtype                      | content                                            |
|---------------|---------|----------------------------|----------------------------------------------------|
| hidden        | (n, d)  | float32, or the model's 16-bit dtype | the last hidden state (after the final norm) |
| head_weight   | (V, d)  | the model's dtype          | the output head's weight (with --head stored)      |
| head_bias     | (V,)    | the model's dtype          | its bias, where the head has one                   |

4·d + 16 bytes a position in float32 (SmolLM2: 2,320), plus the stream's 4 bytes a token; the head's settings
(scale, soft-cap) and sha256 are in the metadata.

The metadata (safetensors' string map) holds ``infoeval`` = JSON with the schema version, the model's
identity, the tokenizer fingerprint, the text's sha256, the window protocol and the sha256 of every tensor's
bytes; reading checks all of them, so a truncated, edited or foreign file fails closed with one line.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import torch

from infoeval import distributed
from infoeval.errors import DataError, spell
from infoeval.gating.compact import CompactDist
from infoeval.input.windows import Window
from infoeval.models.head import OutputHead
from infoeval.output.results import atomic_path

FORMAT = "infoeval/reference"
FORMAT_VERSION = 1
_ID_TENSORS = ("top_ids", "tail_ids")
KINDS = ("topk", "hidden")


@dataclass(frozen=True)
class Reference:
    dist: CompactDist | None  # a top-K reference's; None in a hidden-state one
    target_ids: torch.Tensor  # (n,) int64
    target_logp: torch.Tensor  # (n,) float32
    entropy: torch.Tensor  # (n,) float32
    nbytes: torch.Tensor  # (n,) int64
    stream_ids: torch.Tensor  # (L,) int64
    windows: list[Window]
    meta: dict
    hidden: torch.Tensor | None = None  # (n, d) a hidden-state reference's last hidden states
    head: OutputHead | None = None  # its head, where the file holds one (else the candidate's: ``gating.hidden``)

    @property
    def n(self) -> int:
        return int(self.target_ids.shape[0])

    @property
    def kind(self) -> str:
        return "hidden" if self.hidden is not None else "topk"


def _windows_tensor(windows: list[Window]) -> torch.Tensor:
    rows = [[w.index, w.start, w.length, w.first_scored, w.n_scored, int(w.replace_first_with_bos)] for w in windows]
    return torch.tensor(rows, dtype=torch.int64).reshape(-1, 6)


def _windows_list(t: torch.Tensor) -> list[Window]:
    return [Window(int(a), int(b), int(c), int(d), int(e), bool(f)) for a, b, c, d, e, f in t.tolist()]


def _digest(t: torch.Tensor) -> str:
    """sha256 of a tensor's bytes (an empty one, e.g. --tail-samples 0's, has none: a view of it would fail)."""
    t = t.contiguous()
    return hashlib.sha256(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"").hexdigest()


def to_tensors(ref: Reference, vocab_size: int) -> dict[str, torch.Tensor]:
    id_dtype = torch.uint16 if vocab_size <= 65536 else torch.int32
    common = {
        "target_ids": ref.target_ids.to(torch.int32).contiguous(),
        "target_logp": ref.target_logp.to(torch.float32).contiguous(),
        "entropy": ref.entropy.to(torch.float32).contiguous(),
        "nbytes": ref.nbytes.to(torch.int32).contiguous(),
        "stream_ids": ref.stream_ids.to(torch.int32).contiguous(),
        "windows": _windows_tensor(ref.windows),
    }
    if ref.hidden is not None:
        dtype = getattr(torch, ref.meta["hidden_dtype"])
        return {"hidden": ref.hidden.to(dtype).contiguous(), **(ref.head.tensors() if ref.head else {}), **common}
    d = ref.dist
    return {
        "top_ids": d.top_ids.to(id_dtype).contiguous(),
        "top_logp": d.top_logp.to(torch.float16).contiguous(),
        "tail_logmass": d.tail_logmass.to(torch.float32).contiguous(),
        "tail_ids": d.tail_ids.to(id_dtype).contiguous(),
        "tail_logp": d.tail_logp.to(torch.float16).contiguous(),
        **common,
    }


def write_reference(path: Path, ref: Reference, vocab_size: int) -> int:
    """Write atomically (temp file + rename); returns the file size in bytes. Under a launcher only rank 0
    writes (the others return 0)."""
    from safetensors.torch import save_file

    if not distributed.is_main():
        return 0
    tensors = to_tensors(ref, vocab_size)
    meta = {**ref.meta, "format": FORMAT, "format_version": FORMAT_VERSION, "vocab_size": vocab_size}
    meta["tensor_sha256"] = {k: _digest(v) for k, v in sorted(tensors.items())}
    with atomic_path(path) as tmp:
        save_file(tensors, str(tmp), metadata={"infoeval": json.dumps(meta, sort_keys=True)})
    return Path(path).stat().st_size


def read_reference(path: Path) -> Reference:
    """Load and validate a reference file; every problem is a DataError (exit 2) naming the file."""
    from safetensors import safe_open

    path = Path(path)
    if not path.is_file():
        raise DataError(
            f"reference file '{path}' does not exist; make one with `infoeval reference MODEL {spell('out')} {path}`"
        )
    try:
        with safe_open(str(path), framework="pt") as f:
            raw_meta = (f.metadata() or {}).get("infoeval")
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except Exception as e:  # safetensors raises several types for truncated or garbled files
        raise DataError(
            f"reference file '{path}' is corrupt or truncated ({type(e).__name__}); rebuild it with `infoeval "
            "reference`"
        ) from None
    if raw_meta is None:
        raise DataError(f"'{path}' is a safetensors file but not an infoeval reference (no infoeval metadata)")
    try:
        meta = json.loads(raw_meta)
    except json.JSONDecodeError:
        raise DataError(f"reference file '{path}' has corrupt metadata; rebuild it with `infoeval reference`") from None
    if meta.get("format") != FORMAT or meta.get("format_version") != FORMAT_VERSION:
        raise DataError(
            f"reference file '{path}' has format {meta.get('format')} v{meta.get('format_version')}; this infoeval "
            f"reads {FORMAT} v{FORMAT_VERSION} only: rebuild it with this version's `infoeval reference`"
        )
    want = meta.get("tensor_sha256", {})
    if sorted(want) != sorted(tensors):
        raise DataError(f"reference file '{path}' lacks tensors {sorted(set(want) ^ set(tensors))}; rebuild it")
    bad = [k for k, v in tensors.items() if _digest(v) != want[k]]
    if bad:
        raise DataError(f"reference file '{path}' fails its checksum ({', '.join(sorted(bad))}): corrupt; rebuild it")
    return _from_tensors(tensors, meta)


def _from_tensors(t: dict[str, torch.Tensor], meta: dict) -> Reference:
    def ids(x: torch.Tensor) -> torch.Tensor:
        return x.to(torch.int64)

    hidden = head = dist = None
    if meta.get("kind", "topk") == "hidden":
        hidden = t["hidden"]
        head = OutputHead.from_tensors(t, meta["head"]) if "head_weight" in t else None
    else:
        dist = CompactDist(
            top_ids=ids(t["top_ids"]),
            top_logp=t["top_logp"].float(),
            tail_logmass=t["tail_logmass"].float(),
            tail_ids=ids(t["tail_ids"]),
            tail_logp=t["tail_logp"].float(),
        )
    return Reference(
        dist=dist,
        target_ids=ids(t["target_ids"]),
        target_logp=t["target_logp"].float(),
        entropy=t["entropy"].float(),
        nbytes=ids(t["nbytes"]),
        stream_ids=ids(t["stream_ids"]),
        windows=_windows_list(t["windows"]),
        meta=meta,
        hidden=hidden,
        head=head,
    )
