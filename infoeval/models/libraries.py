"""The quantization libraries as installed here, seen from the loading side: whether one can be imported, their
notices kept off the terminal while they are used, torch's print options kept as they were, and the bytes a
library's module stores. Shared by the shipped checkpoints' loading (``models/shipped.py``) and the method variants
(``quant/methods``)."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import io
import logging
import os
import warnings

import torch


def installed(package: str) -> bool:
    """Whether a library can be imported (a dotted name whose parent package is missing is not installed)."""
    try:
        return importlib.util.find_spec(package) is not None
    except ModuleNotFoundError:
        return False


_PRINT_OPTIONS = ("precision", "threshold", "edgeitems", "linewidth", "sci_mode")


@contextlib.contextmanager
def kept_print_options():
    """torch's print options as they were before the block (AutoRound sets them for the whole process)."""
    import torch
    from torch._tensor_str import PRINT_OPTS

    printing = {k: getattr(PRINT_OPTS, k) for k in _PRINT_OPTIONS}
    try:
        yield
    finally:
        torch.set_printoptions(**printing)


LOGURU_LIBRARIES = ("compressed_tensors",)
LIBRARY_LOGGERS = ("torchao", "torch.utils._pytree", "hqq", "optimum.quanto", "bitsandbytes", "autoround")


@contextlib.contextmanager
def quiet_libraries():
    """The backends' import-time chatter (torchao's missing CUDA extensions, torch's pytree deprecations, hqq's
    notices) kept off the user's terminal while a library is imported and used; errors still raise."""
    loggers = [logging.getLogger(n) for n in LIBRARY_LOGGERS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    loguru = _loguru()  # compressed-tensors logs through loguru, to the stderr it saw at import
    for name in LOGURU_LIBRARIES if loguru else ():
        loguru.disable(name)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)
        for name in LOGURU_LIBRARIES if loguru else ():
            loguru.enable(name)


def _loguru():
    """loguru's logger where it is installed (compressed-tensors depends on it), else None."""
    if not installed("loguru"):
        return None
    from loguru import logger

    return logger


@contextlib.contextmanager
def quiet_checkpoint_io():
    """The libraries' notices and progress bars (HQQ's, AutoRound's repacking, compressed-tensors' per-layer bars)
    kept off the terminal while a checkpoint loads or is written (INFOEVAL_DEBUG=1 shows them), and torch's print
    options as they were. tqdm reads TQDM_DISABLE when it is imported, so the bars' streams are redirected."""
    with kept_print_options():
        if os.environ.get("INFOEVAL_DEBUG"):
            yield
            return
        with quiet_libraries(), contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            yield


@functools.cache
def transformers_quietly() -> None:
    """Import transformers' model code once, its chatter kept quiet (``quiet_libraries``): it imports every
    quantization library installed (torchao from its quantizers, hqq from its KV caches) whether a run uses one or
    not, and they print notices (torchao's missing CUDA extensions; deprecations from torch.jit and torch's pytree)
    that infoeval cannot act on."""
    with quiet_libraries():
        import transformers.modeling_utils  # noqa: F401


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes a tensor holds: a tensor subclass (torchao's, quanto's) by the plain tensors it is made of."""
    if hasattr(t, "__tensor_flatten__"):
        names, _ = t.__tensor_flatten__()
        return sum(tensor_bytes(getattr(t, name)) for name in names)
    return t.numel() * t.element_size()


def stored_bytes(module: torch.nn.Module) -> int:
    """Bytes of every tensor a quantized module stores but its bias (its state dict: what the library saves)."""
    return sum(
        tensor_bytes(t)
        for k, t in module.state_dict().items()
        if isinstance(t, torch.Tensor) and k.rsplit(".", 1)[-1] != "bias"
    )
