"""The installed hami-dcu's version, in one place (`hami-dcu --version`, each component's
User-Agent)."""

from __future__ import annotations

import importlib.metadata


def installed_version() -> str | None:
    """The distribution's version, or None when hami-dcu runs from a checkout not installed."""
    try:
        return importlib.metadata.version("hami-dcu")
    except importlib.metadata.PackageNotFoundError:
        return None
