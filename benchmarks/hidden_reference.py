"""Benchmark: the hidden-state reference on the real SmolLM2-135M: its bytes per position against the top-K file's
and llama.cpp's 2·V, what storing the states in float16 instead of float32 would cost (the mean and largest KL
between the reference's distributions from each, against the run's noise floor), and the gate's metrics against
quantize-compare's on the same tokens.

    python benchmarks/hidden_reference.py [--max-tokens 4096] [--save]

float16 states would be allowed where their mean KL is at most a tenth of the noise floor; infoeval keeps them in
float32 all the same (the model's own dtype where that is 16-bit), because only then does the gate's every number
equal quantize-compare's (``gate_vs_compare``: relative differences) rather than differ by float16's KL.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from _record import add_save, emit  # benchmarks/_record.py

METRICS = ("kl_mean", "kl_p99", "top1", "tv_mean", "rkl_mean", "ppl")


def float16_cost(path: Path) -> dict:
    """KL(p₃₂ ‖ p₁₆) per position: the reference's distribution from float32 states against float16 ones."""
    import torch

    from infoeval.gating.reference_file import read_reference

    ref = read_reference(path)
    kls = []
    for rows in torch.arange(ref.n).split(256):
        h = ref.hidden[rows].float()
        lp = torch.log_softmax(ref.head(h).double(), -1)
        lq = torch.log_softmax(ref.head(h.half().float()).double(), -1)
        kls.append((lp.exp() * (lp - lq)).sum(-1))
    kl = torch.cat(kls)
    return {"kl_mean": kl.mean().item(), "kl_max": kl.max().item()}


def main() -> None:
    import infoeval

    ap = argparse.ArgumentParser()
    ap.add_argument("--max-tokens", type=int, default=4096)
    add_save(ap)
    a = ap.parse_args()
    run = {"max_tokens": a.max_tokens, "device": "cpu"}
    with tempfile.TemporaryDirectory() as tmp:
        hidden, topk = Path(tmp) / "hidden.safetensors", Path(tmp) / "topk.safetensors"
        h = infoeval.reference(out=hidden, format="hidden", **run).to_json()
        shared = infoeval.reference(out=Path(tmp) / "shared.safetensors", format="hidden", head="candidate", **run)
        t = infoeval.reference(out=topk, **run).to_json()
        cost = float16_cost(hidden)
        gate = infoeval.gate(reference=hidden, scheme="int8-channel", floor="full", device="cpu").to_json()
        compared = infoeval.compare(schemes="int8-channel", floor="full", **run).to_json()
    floor = compared["floor"]["metrics"]["kl_mean"]
    want = compared["variants"][0]["metrics"]
    out = {
        "benchmark": "hidden_reference",
        "positions": h["reference"]["tokens"],
        "hidden_size": h["hidden"]["hidden_size"],
        "bytes_per_position": {
            "hidden_head_stored": round(h["bytes_per_position"], 1),
            "hidden_head_shared": round(shared.to_json()["bytes_per_position"], 1),
            "topk": round(t["bytes_per_position"], 1),
            "llama_cpp": h["llama_cpp_bytes_per_position"],
            "four_d": 4 * h["hidden"]["hidden_size"],
        },
        "float16_states": {**cost, "floor_kl_mean": floor, "over_floor": cost["kl_mean"] / floor},
        "float16_within_a_tenth_of_the_floor": cost["kl_mean"] <= floor / 10,
        "states_dtype": "float32",
        "gate_vs_compare": {
            k: {"gate": gate["metrics"][k], "compare": want[k], "relative": abs(gate["metrics"][k] / want[k] - 1)}
            for k in METRICS
        },
    }
    emit(__file__, out, a.save, args=a)


if __name__ == "__main__":
    main()
