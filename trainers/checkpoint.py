"""When a checkpoint counts, and resuming from the newest one that does.

A checkpoint (`checkpoints/step-NNNNNN/`) is written to a temp dir, listed in its
`manifest.json` (every file and its size), fsynced and renamed. It counts only if every
file the manifest lists is there with its size and its weights load strictly (only tied
weights may be absent). A resume takes the newest one that counts and says which ones it
skipped; a kill -9, a full disk or a hand-deleted file costs steps, never a silent restart
from base weights. Checkpoints written before manifests existed must hold the files every
checkpoint has (`LEGACY_FILES` and a `model/*.safetensors`).
"""

from __future__ import annotations

import json
import os
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"
LEGACY_FILES = ("trainer_state.json", "rng.pt", "optimizer.pt", "model/config.json")


class CheckpointError(ValueError):
    """A checkpoint that does not count, worded as one sentence."""


def write_manifest(folder: Path) -> None:
    """List (and fsync) every file of a finished checkpoint folder; the manifest goes last."""
    files: dict[str, int] = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file() and not p.is_symlink() and p.name != MANIFEST:
            with open(p, "rb") as f:
                os.fsync(f.fileno())
            files[p.relative_to(folder).as_posix()] = p.stat().st_size
    tmp = folder / f".{MANIFEST}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"files": files}, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, folder / MANIFEST)


def _listed(folder: Path) -> dict[str, int | None]:
    """The files the checkpoint must hold: name -> size (None: any size)."""
    try:
        data = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        weights = sorted(folder.glob("model/*.safetensors"))
        if not weights:
            raise CheckpointError("model/*.safetensors is missing") from None
        return {name: None for name in LEGACY_FILES}
    except (OSError, UnicodeDecodeError, ValueError):
        raise CheckpointError(f"{MANIFEST} is unreadable") from None
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, dict) or not all(
        isinstance(k, str) and type(v) is int for k, v in files.items()
    ):
        raise CheckpointError(f"{MANIFEST} does not list files and sizes")
    if not any(k.startswith("model/") and k.endswith(".safetensors") for k in files):
        raise CheckpointError(f"{MANIFEST} lists no model weights")
    return dict(files)


def problem(folder: Path) -> str | None:
    """Why `folder` is not a complete checkpoint (a short phrase), or None when it is."""
    try:
        listed = _listed(folder)
        for name in listed:
            if ".." in Path(name).parts or Path(name).is_absolute():
                return f"{MANIFEST} names a path outside the checkpoint ({name!r})"
        for name, size in listed.items():
            p = folder / name
            if p.is_symlink() or not p.is_file():
                return f"{name} is missing"
            if size is not None and p.stat().st_size != size:
                return f"{name} has {p.stat().st_size} bytes, not the {size} it was saved with"
        state = json.loads((folder / "trainer_state.json").read_text(encoding="utf-8"))
    except CheckpointError as e:
        return str(e)
    except (OSError, UnicodeDecodeError, ValueError):
        return "trainer_state.json is unreadable"
    step = folder.name.removeprefix("step-")
    if not (
        isinstance(state, dict)
        and type(state.get("step")) is int
        and type(state.get("version")) is int
        and step.isdigit()
        and state["step"] == int(step)
    ):
        return "trainer_state.json does not hold this checkpoint's step and version"
    return None


def _one_line(e: BaseException) -> str:
    """The cause of an error (also from inside a Ray actor), in one short line."""
    cause = getattr(e, "cause", None) or e
    text = str(cause).strip().splitlines()
    msg = text[0] if text else type(cause).__name__
    if not isinstance(cause, CheckpointError):
        msg = f"{type(cause).__name__}: {msg}"
    return msg[:200]


def restore(
    run: Any, load: Callable[[Path, dict[str, Any]], None], note: Callable[[str], None]
) -> tuple[Path | None, dict[str, Any]]:
    """Load the newest complete checkpoint of `run` into the training and sampling clients
    (`load(ckpt, state)`) and this process's RNGs; returns it and its trainer state, or
    (None, {}) when the run has none.

    Newer checkpoints that do not count are reported through `note` and removed (the
    resumed run redoes their steps). When checkpoints exist but none counts, CheckpointError:
    starting over silently would throw the run's training away.
    """
    import numpy as np
    import torch

    skipped: list[str] = []
    for ckpt in reversed(run.checkpoint_dirs()):
        why = problem(ckpt)
        if why is None:
            try:
                rng = torch.load(ckpt / "rng.pt", weights_only=False)
                state = json.loads((ckpt / "trainer_state.json").read_text(encoding="utf-8"))
                load(ckpt, state)
            except Exception as e:  # noqa: BLE001 - any failure means: not this checkpoint
                why = _one_line(e)
            else:
                random.setstate(rng["python"])
                np.random.set_state(rng["numpy"])
                torch.set_rng_state(rng["torch"])
                for name in skipped:
                    shutil.rmtree(run.checkpoints / name, ignore_errors=True)
                return ckpt, state
        note(_skipped(ckpt, why))
        skipped.append(ckpt.name)
    if skipped:
        raise _none_counts(run, skipped)
    return None, {}


def refuse_when_none_counts(run: Any, note: Callable[[str], None]) -> None:
    """`restore`'s refusal, from the files alone and before any worker starts: when the run
    has checkpoints and not one is complete on disk, say so now, not after every worker has
    loaded the model. Where one is, `restore` decides (its weights must still load)."""
    whys = [(ckpt, problem(ckpt)) for ckpt in reversed(run.checkpoint_dirs())]
    if not whys or any(why is None for _, why in whys):
        return
    for ckpt, why in whys:
        note(_skipped(ckpt, why))
    raise _none_counts(run, [ckpt.name for ckpt, _ in whys])


def _skipped(ckpt: Path, why: str | None) -> str:
    return f"checkpoint {ckpt.name} does not count: {why}; trying an older one"


def _none_counts(run: Any, skipped: list[str]) -> CheckpointError:
    return CheckpointError(
        f"run {run.path} has no complete checkpoint ({', '.join(skipped)} are broken); "
        "move them out of checkpoints/ to start the run over"
    )
