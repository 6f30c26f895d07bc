"""Built-in recipes: short commented YAML configs, used with `skyrl train --config NAME`.

The first line of each file is `# NAME: one-line description`; `skyrl train --list-recipes`
prints those lines. A recipe is an ordinary config layer: `--set` and flags still win.
"""

from __future__ import annotations

from pathlib import Path

RECIPES_DIR = Path(__file__).parent


def recipes() -> dict[str, str]:
    """Recipe name -> its one-line description, sorted by name."""
    out: dict[str, str] = {}
    for path in sorted(RECIPES_DIR.glob("*.yaml")):
        first = path.read_text(encoding="utf-8").splitlines()[0]
        out[path.stem] = first.partition(":")[2].strip()
    return out


def recipe_path(name: str) -> Path | None:
    """The YAML file of a built-in recipe, or None when there is no such recipe."""
    path = RECIPES_DIR / f"{name}.yaml"
    return path if name and "/" not in name and path.exists() else None
