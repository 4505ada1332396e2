"""This machine's float32 arithmetic as a fingerprint, for numbers pinned on one machine.

Two CPUs can run different kernels for the same torch call (AVX-512 or AVX2 code in ATen and in the BLAS, chosen
at run time), which round differently: seen on 2026-12-02, a machine whose SmolLM2 KL values differed from the
records' machine by up to 9e-5 relative (3e-4 for a difference of two nearly equal numbers) and whose reference
tensors hashed differently, with the same code. ``fingerprint`` hashes the bits of a few fixed float32
computations through the kernels the commands use (a matrix product, exp, log_softmax, a row sum, SiLU, rsqrt),
on one thread: machines with the same fingerprint computed the same bits in every record checked so far, so
records pinned on one machine are compared exactly only on machines with its fingerprint
(``tests/golden/machines/<fingerprint>/``, ``test_gate_real.PINNED_BY_MACHINE``), and within float32 rounding
(``within_rounding``) elsewhere.

    python tests/machine.py        # prints this machine's fingerprint
"""

from __future__ import annotations

import hashlib
import re

import torch

SHA256 = re.compile(r"^[0-9a-f]{64}$")  # a digest of bits (tensors, files): compared only on the same arithmetic
OTHER_REL, OTHER_ABS = 1e-4, 1e-6  # another CPU's rounding: |got − want| ≤ OTHER_REL·|want| + OTHER_ABS
# One position's value (a maximum, a quantile), not an average: its rounding does not average out. A per-position KL
# of two near-equal distributions is a difference of float32 log-probabilities (|ln p| up to ~20, one ulp ~2e-6) and
# keeps their absolute rounding: seen on 2026-12-05, a CI machine's SmolLM2 int8 kl_max 5.7e-6 and kl_p90 1.8e-6 off
# the records (1.5e-4, 2.8e-4 relative) while every mean was within OTHER_REL.
OTHER_POSITION_ABS = 1e-5
ORDER_STATISTIC = re.compile(r"_(max|min|p\d+)$")  # a leaf naming one position's value: kl_max, kl_p99, entropy_p10


def fingerprint() -> str:
    """16 hex digits of sha256 over the bits of fixed float32 computations on one thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        g = torch.Generator().manual_seed(0)
        x, up, down = (torch.randn(*shape, generator=g) for shape in ((256, 576), (1536, 576), (576, 1536)))
        y = torch.nn.functional.linear(x, up) / 24.0  # SmolLM2's MLP shapes: the BLAS kernels of a real forward
        z = torch.nn.functional.linear(torch.nn.functional.silu(y), down)
        lp = torch.log_softmax(y, dim=-1)
        parts = [y, z, lp, lp.exp(), lp.exp().sum(-1), torch.rsqrt(y.abs() + 1.0)]
        digest = hashlib.sha256()
        for t in parts:
            digest.update(t.contiguous().view(torch.int32).numpy().tobytes())
        return digest.hexdigest()[:16]
    finally:
        torch.set_num_threads(threads)


def within_rounding(want: float, got: float, one_position: bool = False) -> bool:
    """Whether ``got`` is ``want`` up to another CPU's float32 rounding (``OTHER_REL``, ``OTHER_ABS``; plus
    ``OTHER_POSITION_ABS`` for ``one_position``: an order statistic of per-position values)."""
    slack = OTHER_ABS + (OTHER_POSITION_ABS if one_position else 0.0)
    return abs(got - want) <= OTHER_REL * abs(want) + slack


if __name__ == "__main__":
    print(fingerprint())
