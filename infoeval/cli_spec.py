"""Commands for speculative decoding and distillation (issue 4): spec-accept, spec-decode, distill, temperature."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this module's commands to the infoeval app."""
