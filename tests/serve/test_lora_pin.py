"""A LoRA session of `skyrl serve`, pinned before issue 32 moved serve's LoRA into the
learner: the same seeded adapter, trained the same way, must save the same tensors.
Recorded from 233f7cf; `SKYRL_PIN_RECORD=1` rewrites lora_pin.json."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest
from tinker import types

from tests.serve.conftest import Server
from tests.serve.test_tinker_api import TEXT, service, sft_datum

PIN_FILE = Path(__file__).parent / "lora_pin.json"


def test_lora_adapter_tensors_are_pinned(server: Server) -> None:
    from safetensors.torch import load_file

    tc = service(server).create_lora_training_client(base_model="tiny", rank=4, seed=7).result()
    datum = sft_datum(tc.get_tokenizer(), TEXT)
    losses = []
    for _ in range(3):
        losses.append(tc.forward_backward([datum], "cross_entropy").result().metrics["loss:sum"])
        tc.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    path = tc.save_state("pin").result().path
    with sqlite3.connect(server.state_dir / "serve.db") as db:
        (folder,) = db.execute("SELECT dir FROM checkpoints WHERE path = ?", (path,)).fetchone()
    adapter = load_file(str(Path(folder) / "adapter.safetensors"))
    got = {
        "losses": losses,
        "tensors": {
            k: [float(v.double().sum()), float(v.double().norm()), list(v.shape)]
            for k, v in sorted(adapter.items())
        },
    }
    if os.environ.get("SKYRL_PIN_RECORD") == "1":
        PIN_FILE.write_text(json.dumps(got, indent=1) + "\n")
        return
    want = json.loads(PIN_FILE.read_text())
    assert got["losses"] == pytest.approx(want["losses"], rel=1e-6, abs=1e-6)
    assert sorted(got["tensors"]) == sorted(want["tensors"])
    for k, (s, n, shape) in want["tensors"].items():
        assert got["tensors"][k][2] == shape, k
        assert got["tensors"][k][:2] == pytest.approx([s, n], rel=1e-5, abs=1e-6), k
