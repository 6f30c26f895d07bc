"""The one way our commands make a Rich console: NO_COLOR (no-color.org) turns every style
off, bold and dim included, not just colours as Rich alone would."""

from __future__ import annotations

import os
from typing import Any


def console(**kwargs: Any) -> Any:
    from rich.console import Console

    if os.environ.get("NO_COLOR"):
        kwargs["color_system"] = None
    return Console(**kwargs)
