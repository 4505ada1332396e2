"""Commands for CI regression gates (issue 3): reference, gate, quantize."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this module's commands to the infoeval app."""
