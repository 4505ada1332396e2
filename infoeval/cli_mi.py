"""Commands for mutual information and KL fitting (issue 5): mutual-info, kl-fit."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this module's commands to the infoeval app."""
