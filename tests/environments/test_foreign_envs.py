"""Environments from the ecosystem: SkyRL-Gym's through `--env skyrl_gym:<name>`, and
SkyRL's dataset rows (JSONL or Parquet) read by the task loader."""

from __future__ import annotations

import json

import pytest

from environments import registry
from tasks.task import Task, load_tasks
from tests.conftest import NO_TRACKING, skyrl

pytest.importorskip("skyrl_gym", reason="the optional extra skyrl-gym is not installed")

QUESTIONS = [
    ("What is 6 times 7?", "42"),
    ("What is 50 plus 22?", "72"),
    ("What is 9 minus 4?", "5"),
]


def rows(split="train"):
    """GSM8K rows exactly as SkyRL's examples/gsm8k/gsm8k_dataset.py writes them."""
    return [
        {
            "data_source": "openai/gsm8k",
            "prompt": [
                {
                    "role": "user",
                    "content": q + " Let's think step by step and output the final answer "
                    'after "####".',
                }
            ],
            "env_class": "gsm8k",
            "reward_spec": {"method": "rule", "ground_truth": a},
            "extra_info": {"split": split, "index": i, "answer": f"#### {a}", "question": q},
        }
        for i, (q, a) in enumerate(QUESTIONS)
    ]


def test_skyrl_rows_load_from_jsonl_and_parquet(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    (tmp_path / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows()) + "\n")
    pq.write_table(pa.Table.from_pylist(rows()), tmp_path / "train.parquet")
    for path in (tmp_path / "train.jsonl", tmp_path / "train.parquet"):
        tasks = load_tasks(path)
        assert [t.id for t in tasks] == ["openai/gsm8k-0", "openai/gsm8k-1", "openai/gsm8k-2"]
        assert tasks[1].env == "skyrl_gym:gsm8k" and tasks[1].answer == "72"
        assert tasks[1].split == "train" and tasks[1].metadata["reward_spec"]["method"] == "rule"
        assert tasks[1].prompt[0]["content"].startswith("What is 50 plus 22?")
    with pytest.raises(ValueError, match="unknown field"):
        Task.from_dict({**rows()[0], "surprise": 1})


def test_skyrl_gym_gsm8k_through_the_adapter():
    spec = registry.resolve("skyrl_gym:gsm8k")
    env = registry.make_env(spec)
    task = Task.from_dict(rows()[1])
    obs, info = env.reset(options={"task": task})
    assert obs.startswith("What is 50 plus 22?") and info["task_id"] == "openai/gsm8k-1"
    _, reward, terminated, truncated, info = env.step("50 + 22 = 72\n#### 72")
    assert (reward, terminated, truncated, info["correct"]) == (1.0, True, False, True)
    env.reset(options={"task": task.to_json() and json.loads(task.to_json())})
    assert env.step("#### 71")[1] == 0.0
    with pytest.raises(ValueError, match="SkyRL-Gym has no environment 'nope'"):
        registry.make_env(registry.resolve("skyrl_gym:nope"))


def test_skyrl_gym_gsm8k_trains_two_steps_with_tiny(tmp_path, ray_address):
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    pq.write_table(pa.Table.from_pylist(rows()), tmp_path / "gsm8k.parquet")
    skyrl(
        "train",
        *("--env", "skyrl_gym:gsm8k", "--tasks", "gsm8k.parquet", "--model", "tiny"),
        *("--max-steps", "2", "--run-name", "gsm8k", "--ray-address", ray_address),
        *("--set", "rollout.batch_size=2", "--set", "rollout.group_size=2"),
        *("--set", "rollout.max_new_tokens=16", "--set", "eval.limit=0", *NO_TRACKING),
        cwd=tmp_path,
    )
    (run,) = (tmp_path / "runs").glob("gsm8k*")
    metrics = [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    assert all(m["episodes"] == 4 and m["episodes/failed"] == 0 for m in metrics), metrics
    rollouts = (run / "rollouts" / "step-000002.jsonl").read_text().splitlines()
    assert all("What is" in json.dumps(json.loads(r)["turns"][0]) for r in rollouts)


VF_MODULE = '''"""A verifiers (v1) environment module: sums, reward 1 for the right number."""
import verifiers.v1 as vf

__all__ = ["SumTaskset", "SumTask", "SumData"]


class SumData(vf.TaskData):
    answer: str = ""


class SumTask(vf.Task[SumData]):
    @vf.reward
    async def correct(self, task, trace) -> float:
        words = trace.last_reply.replace(".", " ").split()
        return float(bool(words) and words[-1] == task.answer)


class SumTaskset(vf.Taskset[SumTask]):
    def load(self):
        for i, (a, b) in enumerate([(2, 3), (4, 5), (6, 7), (10, 11)]):
            data = SumData(id=f"sum-{i}", prompt=f"What is {a} + {b}?", answer=str(a + b))
            yield SumTask(data, self.config.task)
'''


@pytest.fixture
def vf_module(tmp_path, monkeypatch):
    pytest.importorskip("verifiers.v1", reason="the optional extra verifiers is not installed")
    (tmp_path / "vf_sums.py").write_text(VF_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_verifiers_env_through_the_adapter(vf_module):
    spec = registry.resolve("verifiers:vf_sums")
    tasks = registry.bundled_tasks(spec, "train")
    assert [t.id for t in tasks] == ["sum-0", "sum-1", "sum-2", "sum-3"]
    env = registry.make_env(spec)
    obs, info = env.reset(options={"task": tasks[2]})
    assert obs == "What is 6 + 7?" and info["task_id"] == "sum-2"
    _, reward, terminated, _, info = env.step("6 + 7 = 13.")
    assert (reward, terminated, info["rewards"]) == (1.0, True, {"correct": 1.0})
    env.reset(options={"task": tasks[2]})
    assert env.step("12")[1] == 0.0


def test_verifiers_env_trains_two_steps_with_tiny(vf_module, ray_address):
    skyrl(
        "train",
        *("--env", "verifiers:vf_sums", "--model", "tiny", "--max-steps", "2"),
        *("--run-name", "sums", "--ray-address", ray_address),
        *("--set", "rollout.batch_size=2", "--set", "rollout.group_size=2"),
        *("--set", "rollout.max_new_tokens=16", "--set", "eval.limit=0", *NO_TRACKING),
        cwd=vf_module,
        env={"PYTHONPATH": str(vf_module)},
    )
    (run,) = (vf_module / "runs").glob("sums*")
    metrics = [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    assert all(m["episodes"] == 4 and m["episodes/failed"] == 0 for m in metrics), metrics
    rollouts = (run / "rollouts" / "step-000002.jsonl").read_text().splitlines()
    assert all("What is" in json.dumps(json.loads(r)["turns"][0]) for r in rollouts)


def _lcb_row():
    """A LiveCodeBench row as SkyRL writes them: one stdin test."""
    tests = [{"input": "", "output": "ok\n", "testtype": "stdin"}]
    return {
        "data_source": "livecodebench",
        "prompt": [{"role": "user", "content": "Print ok."}],
        "env_class": "lcb",
        "reward_spec": {"method": "rule", "ground_truth": json.dumps(tests)},
        "extra_info": {},
    }


def test_skyrl_gym_env_that_executes_model_code_is_refused_unless_trusted(tmp_path):
    """Attack: SkyRL-Gym's `lcb` exec()s the model's code in a process on this host, outside
    skyrl's sandbox; a policy's reply writes a file here. Without `trust_host=True` the
    adapter refuses such an environment in one sentence before any action runs."""
    from environments.foreign import SkyRLGymEnv

    target = tmp_path / "pwned"
    write = f"fd = os.open({str(target)!r}, os.O_WRONLY | os.O_CREAT)\nos.write(fd, b'host')"
    attack = f"```python\nimport os\n{write}\nprint('ok')\n```"  # LCB mocks open()
    with pytest.raises(ValueError, match="outside skyrl's sandbox.*trust_host"):
        SkyRLGymEnv("lcb")
    for name in ("text2sql", "search", "searchcode"):
        with pytest.raises(ValueError, match="trust_host"):
            SkyRLGymEnv(name)
    assert not target.exists()
    env = SkyRLGymEnv("lcb", trust_host=True)  # the user accepted it: it runs, as SkyRL's would
    env.reset(options={"task": _lcb_row()})
    env.step(attack)
    assert target.read_text() == "host"


def test_skyrl_train_refuses_an_unsandboxed_skyrl_gym_env_in_one_sentence(tmp_path):
    rows = tmp_path / "lcb.jsonl"
    rows.write_text(json.dumps(_lcb_row()) + "\n")
    proc = skyrl(
        "train",
        "--env",
        "skyrl_gym:lcb",
        "--model",
        "tiny",
        "--tasks",
        str(rows),
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert "outside skyrl's sandbox" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
