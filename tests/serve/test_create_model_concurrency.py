"""Model creation under concurrency (issue 37, item 9): four `create_model` calls at once on
a fresh `skyrl serve` must not break the creates and training that follow."""

from __future__ import annotations

import contextlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import tinker
from tinker import types

from tests.serve.conftest import start_server

KEY = "tml-local-test"
ROUNDS = 3


def test_four_concurrent_creates_leave_later_creates_and_training_working(
    tmp_path: Path,
) -> None:
    server = start_server(tmp_path / "state")
    sc = tinker.ServiceClient(base_url=server.url, api_key=KEY)
    try:
        # LoRA (unties the unembedding) and full fine-tuning mixed, issued at once; a few
        # rounds, since two loads must overlap in the server's threads to collide
        ranks = [8, 0, 4, 8]

        def create(rank: int) -> tinker.TrainingClient:
            return sc.create_lora_training_client(base_model="tiny", rank=rank, seed=1).result()

        clients: list[tinker.TrainingClient] = []
        for _ in range(ROUNDS):
            with ThreadPoolExecutor(len(ranks)) as pool:
                clients += pool.map(create, ranks)
        assert [tc.get_info().lora_rank for tc in clients[:4]] == [8, None, 4, 8]
        later = sc.create_lora_training_client(base_model="tiny", rank=8, seed=2).result()
        tok = later.get_tokenizer()
        ids = tok.encode("The answer is 42 and the question is old.")
        datum = types.Datum(
            model_input=types.ModelInput.from_ints(ids[:-1]),
            loss_fn_inputs={"target_tokens": ids[1:], "weights": [1.0] * (len(ids) - 1)},
        )
        for tc in [*clients[:4], later]:
            out = tc.forward_backward([datum], "cross_entropy").result()
            assert out.metrics["loss:sum"] > 0
            tc.optim_step(types.AdamParams(learning_rate=1e-3)).result()
    finally:
        with contextlib.suppress(Exception):
            sc.close("success").result(timeout=10)
        server.stop()
