"""Where the engine's time went: the models' forward passes (each role's), the reducer's statistics, the rest."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from dataclasses import dataclass


@dataclass
class Clock:
    """Where ``run``'s time went, in seconds: ``forward_s`` in the models (decoder blocks, heads, a variant's
    dequantization, the finiteness check), ``reduce_s`` in the reducer's own work (the per-position statistics);
    the rest is the engine's (columns, gathering). Measured on a CPU only (``measured``): on an accelerator the
    kernels run asynchronously, and the host's times would not say where the device's time went."""

    forward_s: float = 0.0
    reduce_s: float = 0.0
    measured: bool = False
    roles: dict = dataclasses.field(default_factory=dict)  # role → its forward seconds (blocks and head)

    @contextlib.contextmanager
    def forward(self, role: str | None = None):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            dt = time.perf_counter() - t0
            self.forward_s += dt
            if role is not None:
                self.roles[role] = self.roles.get(role, 0.0) + dt

    def timings(self, prefix: str = "eval_") -> dict[str, float]:
        """{prefix + "forward_s", prefix + "statistics_s"} when measured, else nothing."""
        return {f"{prefix}forward_s": self.forward_s, f"{prefix}statistics_s": self.reduce_s} if self.measured else {}
