"""What the `skyrl train` driver imports: the model runs in its Ray workers, so the driver
needs neither transformers nor DeepSpeed (each seconds of CPU at every start). Read from the
real command's own import log (`PYTHONPROFILEIMPORTTIME`, the driver process only: the
joined cluster's workers do not inherit it)."""

from __future__ import annotations

import re

from tests.conftest import TINY_MATH, skyrl


def test_the_driver_of_a_ray_run_imports_no_transformers(tmp_path, ray_address):
    proc = skyrl(
        "train",
        *TINY_MATH,
        "--max-steps",
        "1",
        "--ray-address",
        ray_address,
        cwd=tmp_path,
        env={"PYTHONPROFILEIMPORTTIME": "1"},
    )
    imported = set(re.findall(r"^import time:.*\|\s*([\w.]+)$", proc.stderr, re.MULTILINE))
    assert "trainers.session" in imported and "ray" in imported  # the log is the driver's
    assert "dev accuracy" in proc.stdout
    heavy = {m for m in imported if m.split(".")[0] in {"transformers", "deepspeed"}}
    assert not heavy, sorted(heavy)[:5]
