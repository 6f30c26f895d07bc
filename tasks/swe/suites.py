"""The instances `skyrl eval --suite` runs: a suite by name or file, and a selection of it.

    from tasks.swe.suites import load_suite, select
    instances = select(load_suite("swe-bench-mini"), None, "0:5")

swe-bench-mini is built here; `swe-bench-lite` and `swe-bench-verified` are the official
datasets (downloaded from the Hugging Face hub when it is reachable); anything else is an
official-format JSONL or Parquet file, read by `tasks.swe.load_instances`.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

OFFICIAL = {
    "swe-bench-lite": "princeton-nlp/SWE-bench_Lite",
    "swe-bench-verified": "princeton-nlp/SWE-bench_Verified",
    "swe-bench": "princeton-nlp/SWE-bench",
}
"""Official dataset names -> their Hugging Face dataset (split `test`); the dataset ids
themselves (`--suite princeton-nlp/SWE-bench_Lite`) are accepted too."""
OFFICIAL.update({hub: hub for hub in list(OFFICIAL.values())})


def load_suite(name: str) -> list[dict[str, Any]]:
    """swe-bench-mini, an official dataset name (needs a reachable hub), or a file."""
    from tasks.swe import load_instances

    if name not in OFFICIAL:
        return load_instances(name)
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes") or not reachable(
        "huggingface.co"
    ):
        raise ValueError(
            f"{name} is downloaded from the Hugging Face hub, which is not reachable here; "
            "pass the instances as a JSONL or Parquet file (--suite FILE) or use swe-bench-mini"
        )
    import tempfile

    from datasets import load_dataset

    rows = load_dataset(OFFICIAL[name], split="test")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{name}.jsonl"
        path.write_text("".join(json.dumps(dict(r)) + "\n" for r in rows), encoding="utf-8")
        return load_instances(path)


def reachable(host: str, port: int = 443, timeout: float = 3.0) -> bool:
    """Whether a TCP connection to `host` opens (the hub or GitHub, before a download)."""
    try:
        socket.create_connection((host, port), timeout=timeout).close()
        return True
    except OSError:
        return False


def select(
    instances: list[dict[str, Any]],
    ids: str | None,
    span: str | None,
    sample: int | None = None,
    seed: int = 0,
) -> list[dict]:
    """The instances named by `--instances a,b` (or `a b`), `--slice START:END`, or
    `--sample N` (N drawn with `seed`, in suite order); all without any."""
    if sample is not None:
        import random

        if sample > len(instances):
            raise ValueError(
                f"--sample {sample} is more than the suite's {len(instances)} instances"
            )
        picked = set(random.Random(seed).sample(range(len(instances)), sample))
        return [inst for i, inst in enumerate(instances) if i in picked]
    if ids:
        wanted = [i.strip() for i in ids.replace(" ", ",").split(",") if i.strip()]
        by_id = {str(i["instance_id"]): i for i in instances}
        unknown = [i for i in wanted if i not in by_id]
        if unknown:
            known = ", ".join(list(by_id)[:5])
            raise ValueError(
                f"unknown instance id(s) {', '.join(unknown)}; the suite has e.g. {known}"
            )
        return [by_id[i] for i in wanted]
    if span:
        start, sep, end = span.partition(":")
        try:
            if not sep:
                raise ValueError
            chosen = instances[int(start) if start else None : int(end) if end else None]
        except ValueError:
            raise ValueError(
                f"--slice {span!r} must look like START:END, e.g. 0:10 or :5"
            ) from None
        if not chosen:
            raise ValueError(
                f"--slice {span} selects none of the suite's {len(instances)} instances"
            )
        return chosen
    return instances
