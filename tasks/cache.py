"""Where skyrl keeps things it builds once per machine (SQLite files, converted models)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """The cache root: `$SKYRL_CACHE_DIR` if set, else `~/.cache/skyrl`; created if missing."""
    env = os.environ.get("SKYRL_CACHE_DIR")
    path = Path(env) if env else Path.home() / ".cache" / "skyrl"
    path.mkdir(parents=True, exist_ok=True)
    return path
