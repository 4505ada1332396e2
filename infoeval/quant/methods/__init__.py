"""Method-qualified schemes: ``<backend>:<spec>`` (``hqq:int4-g64``) quantizes the reference's weights with that
library's public API and runs its own kernels in the forward pass, where a plain scheme (``int4-g128``) is
infoeval's round-to-nearest fake quantization. Each backend is an optional dependency (an extra); naming one that
is not installed, or a spec it does not take, is a usage error of one line, before anything loads.

Backends: ``hqq``, ``quanto``, ``torchao``, ``bnb``, each quantizing one Linear at a time, and ``autoround``, which
learns from calibration text (``methods/calibration.py``) over the whole model (``methods/<backend>.py``).
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version

from infoeval.errors import UsageError

# installed, kept_print_options, quiet_libraries: also re-exported for the adapters
from infoeval.models.libraries import LIBRARY_LOGGERS, installed, kept_print_options, quiet_libraries  # noqa: F401


@dataclass(frozen=True)
class Backend:
    name: str
    module: str  # infoeval's adapter
    package: str  # the import name of the library
    distribution: str  # its name on PyPI (for its version)
    extra: str  # pip install 'infoeval[<extra>]'
    grammar: str  # the specs it takes, for the error line


BACKENDS = {
    "hqq": Backend(
        "hqq",
        "infoeval.quant.methods.hqq",
        "hqq",
        "hqq",
        "hqq",
        "int<bits>[-g<N>|-channel], bits 8, 6, 5, 4, 3, 2 or 1; N a multiple of 8 (default 64)",
    ),
    "quanto": Backend(
        "quanto",
        "infoeval.quant.methods.quanto",
        "optimum.quanto",
        "optimum-quanto",
        "quanto",
        "int8, int4, int2 or float8",
    ),
    "torchao": Backend(
        "torchao",
        "infoeval.quant.methods.torchao",
        "torchao",
        "torchao",
        "torchao",
        "int8[-g<N>], int<1-7>-g<N>|-channel or float8",
    ),
    "bnb": Backend(
        "bnb", "infoeval.quant.methods.bnb", "bitsandbytes", "bitsandbytes", "bnb", "nf4|fp4[-g<N>][-dq] or int8"
    ),
    "autoround": Backend(
        "autoround",
        "infoeval.quant.methods.autoround",
        "auto_round",
        "auto-round",
        "autoround",
        "int<bits>[-g<N>|-channel][-asym][-iters<N>], bits 2, 3, 4 or 8",
    ),
}


@dataclass(frozen=True)
class MethodScheme:
    """One library's quantization at some settings: ``name`` as given on the command line, ``settings`` as the
    backend parsed them (what its library is called with), ``bits``/``group_size`` for the tables."""

    backend: str
    spec: str
    settings: dict = field(compare=False)
    bits: float | None = None
    group_size: int | None = None

    @property
    def name(self) -> str:
        return f"{self.backend}:{self.spec}"

    def adapter(self):
        return importlib.import_module(BACKENDS[self.backend].module)

    @property
    def calibrated(self) -> bool:
        """Whether the method learns from calibration text (AutoRound)."""
        return bool(getattr(self.adapter(), "CALIBRATED", False))

    def as_dict(self) -> dict:
        """The scheme's record in a result: the backend, its library's version and the settings it was called with."""
        b = BACKENDS[self.backend]
        return {
            "name": self.name,
            "backend": self.backend,
            "library": b.distribution,
            "library_version": library_version(b),
            "bits": self.bits,
            "group_size": self.group_size,
            "symmetric": None,
            "settings": dict(self.settings),
        }


def library_version(backend: Backend) -> str | None:
    try:
        return version(backend.distribution)
    except PackageNotFoundError:
        return None


def is_method(text: str) -> bool:
    """Whether a scheme name names a backend (``hqq:int4-g64``) rather than infoeval's own rounding."""
    return ":" in text


def parse_method(text: str) -> MethodScheme:
    """``<backend>:<spec>`` → MethodScheme; an unknown backend, a library that is not installed or a spec the
    backend does not take is a usage error naming what is allowed."""
    backend, _, spec = text.strip().partition(":")
    backend, spec = backend.lower(), spec.strip().lower()
    if backend not in BACKENDS:
        raise UsageError(
            f"unknown quantization backend '{backend}' in '{text}'; backends: {', '.join(sorted(BACKENDS))} "
            "(or a plain scheme such as int4-g128)"
        )
    b = BACKENDS[backend]
    if not installed(b.package):
        raise UsageError(
            f"'{text}' needs the {b.distribution} package, which is not installed: pip install 'infoeval[{b.extra}]'"
        )
    settings, bits, group = importlib.import_module(b.module).parse(spec, text)
    return MethodScheme(backend, spec, settings, bits, group)
