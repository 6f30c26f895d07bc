"""Multi-container Harbor tasks: an `environment/docker-compose.yaml` that adds a sidecar
service the tests reach by its name, as Harbor merges it over its base compose (`main` is
the task's Dockerfile). A replica of real tasks (a tool service whose request log, on a named
volume mounted read-only in `main`, is what the verifier grades; a target app behind a
healthcheck): the sidecar is built like the main image, started in the episode's network
namespace with its compose `environment:` (`${VAR:-default}` from defaults only), its name
resolving to the episode's loopback, `main` waiting for its healthcheck. A compose feature
not supported here is one pre-flight sentence, the task skipped, the rest of the folder run.

Sidecars share the episode's own network namespace, which needs root (and bubblewrap)."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from environments import harbor, harbor_compose
from environments.sandbox import bwrap_available

episodes = pytest.mark.skipif(
    not bwrap_available() or os.geteuid() != 0,
    reason="an episode's own network needs root and bubblewrap",
)

SERVER = """import http.server, os
PORT = int(os.environ["API_PORT"])
GREETING = os.environ["GREETING"]
os.makedirs("/var/log/api", exist_ok=True)

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path != "/health":
            with open("/var/log/api/requests.log", "a") as f:
                f.write(f"GET {self.path} {GREETING}\\n")
        body = (GREETING if self.path == "/greet" else "ok").encode()
        self.send_response(200)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

http.server.HTTPServer(("0.0.0.0", PORT), Handler).serve_forever()
"""
COMPOSE = """services:
  api:
    build:
      context: ./api
    environment:
      API_PORT: "8765"
      GREETING: ${GREETING:-hello-from-api}
    volumes:
      - api_log:/var/log/api
    healthcheck:
      test: ["CMD", "python3", "-c", "import urllib.request as u; u.urlopen('http://localhost:8765/health')"]
      interval: 1s
      retries: 20
    restart: unless-stopped
    networks:
      - tasknet
  main:
    environment:
      API_URL: http://api:8765
    volumes:
      - api_log:/srv/api-log:ro
    depends_on:
      api:
        condition: service_healthy
    networks:
      - tasknet
volumes:
  api_log:
networks:
  tasknet:
    driver: bridge
"""
API_DOCKERFILE = """FROM python:3.12-slim
WORKDIR /srv
COPY server.py /srv/server.py
RUN python3 - <<'EOF'
from pathlib import Path
if True:
    Path("/srv/built").write_text("yes")
EOF
RUN printf '#!/bin/sh\\n[ -f /srv/built ] && exec "$@"\\n' > /start.sh && chmod +x /start.sh
EXPOSE 8765
ENTRYPOINT ["/start.sh"]
CMD ["python3", "/srv/server.py"]
"""
"""As the real target app's: a heredoc RUN, and an ENTRYPOINT script a RUN writes at `/`."""
SOLVE = """#!/bin/bash
python3 -c "import os, urllib.request as u; print(u.urlopen(os.environ['API_URL'] + '/greet').read().decode())" > /app/answer.txt
"""
TEST_SH = """#!/bin/bash
ok=1
[ "$(cat /app/answer.txt 2>/dev/null)" = hello-from-api ] || ok=0
grep -qx "GET /greet hello-from-api" /srv/api-log/requests.log || ok=0
touch /srv/api-log/forged 2>/dev/null && ok=0
getent hosts api | grep -q 127.0.0.1 || ok=0
echo $ok > /logs/verifier/reward.txt
"""


def make_task(root: Path, compose: str = COMPOSE) -> Path:
    env = root / "environment"
    (env / "api").mkdir(parents=True)
    (env / "Dockerfile").write_text("FROM python:3.12-slim\nWORKDIR /app\n")
    (env / "docker-compose.yaml").write_text(compose)
    (env / "api" / "Dockerfile").write_text(API_DOCKERFILE)
    (env / "api" / "server.py").write_text(SERVER)
    (root / "instruction.md").write_text("Fetch the greeting from the api service.")
    (root / "task.toml").write_text('version = "1.0"\n[verifier]\ntimeout_sec = 30.0\n')
    (root / "tests").mkdir()
    (root / "tests" / "test.sh").write_text(TEST_SH)
    (root / "solution").mkdir()
    (root / "solution" / "solve.sh").write_text(SOLVE)
    return root


@pytest.fixture()
def cache():
    root = Path(tempfile.mkdtemp(prefix="skyrl-harbor-compose-"))  # the sandbox uids reach it
    harbor._built.cache_clear()
    yield root
    harbor._built.cache_clear()
    shutil.rmtree(root, ignore_errors=True)


def skyrl_eval(agent: str, tasks: Path, cache: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "skyrl_cli.main", "eval", "--env", "shell", "--agent", agent]
    # a GREETING of this host's is never the sidecar's: `${GREETING:-...}` is its default
    env = {**os.environ, "SKYRL_HARBOR_CACHE": str(cache), "GREETING": "from-the-host"}
    return subprocess.run(
        [*cmd, "--tasks", str(tasks)], capture_output=True, text=True, env=env, timeout=300
    )


@episodes
def test_a_sidecar_serves_the_solution_and_its_log_grades_it(tmp_path, cache):
    """The oracle reaches `http://api:8765` (its name resolves to the episode's loopback; the
    sidecar's GREETING is its compose default, never the host's), the sidecar logs to the
    named volume, which the verifier reads read-only in main: 1; noop: 0 (before: 0 for
    both, the sidecar never built nor started)."""
    make_task(tmp_path / "tasks" / "sidecar")
    done = skyrl_eval("oracle", tmp_path / "tasks", cache)
    assert "sidecar: reward 1" in done.stdout, (done.stdout, done.stderr)
    done = skyrl_eval("noop", tmp_path / "tasks", cache)
    assert "sidecar: reward 0" in done.stdout, (done.stdout, done.stderr)


@episodes
def test_an_unsupported_compose_feature_is_one_sentence_and_the_rest_runs(tmp_path, cache):
    """A service that asks for the host's network (`network_mode: host`) cannot run here: one
    pre-flight sentence naming it, that task not run; the good task beside it scores 1."""
    make_task(tmp_path / "tasks" / "good")
    make_task(
        tmp_path / "tasks" / "hostnet",
        COMPOSE.replace("    restart: unless-stopped\n", "    network_mode: host\n"),
    )
    done = skyrl_eval("oracle", tmp_path / "tasks", cache)
    lines = done.stdout.splitlines()
    assert any(ln.startswith("good: reward 1") for ln in lines), lines
    flight = [ln for ln in lines if ln.startswith("pre-flight: hostnet")]
    assert len(flight) == 1 and flight[0].endswith(
        "sets `network_mode: host`, which is not supported here (a service here is on the "
        "episode's own network, where main reaches it by its name)"
    ), lines
    assert any(ln.startswith("hostnet: not run") for ln in lines), lines


@episodes
def test_a_services_run_and_command_write_nothing_on_the_host(tmp_path, cache):
    """The sidecar's Dockerfile writes `/start.sh` (its ENTRYPOINT), and RUN steps and its
    CMD write at the top of the image and in `/etc`, `/root`, `/tmp`, `/usr/local`: none of
    it reaches this machine's files, and the task still scores 1 (an empty root-owned
    `/start.sh` once appeared in the host's `/`)."""
    token = secrets.token_hex(4)
    paths = ["/start.sh", f"/x-{token}", f"/etc/skyrl-{token}", f"/root/skyrl-{token}",
             f"/tmp/skyrl-{token}", f"/usr/local/skyrl-{token}"]  # fmt: skip # one list
    before = {p: os.path.lexists(p) for p in paths}
    task = make_task(tmp_path / "tasks" / "hostile")
    writes = "; ".join(f"echo hostile > {p} 2>/dev/null" for p in paths[1:])
    dockerfile = API_DOCKERFILE.replace("EXPOSE", f"RUN {writes}; true\nEXPOSE")
    command = f'CMD ["sh", "-c", "{writes}; exec python3 /srv/server.py"]'
    dockerfile = dockerfile.replace('CMD ["python3", "/srv/server.py"]', command)
    (task / "environment" / "api" / "Dockerfile").write_text(dockerfile)
    done = skyrl_eval("oracle", tmp_path / "tasks", cache)
    assert "hostile: reward 1" in done.stdout, (done.stdout, done.stderr)
    after = {p: os.path.lexists(p) for p in paths}
    assert after == before, [p for p in paths if after[p] != before[p]]


def test_the_file_is_data_defaults_only_and_host_paths_refused(tmp_path, monkeypatch):
    """`${VAR:-default}` is its default whatever this host sets; a bind mount of a host path
    and a prebuilt image are each one sentence naming them; not root, a task with sidecars
    is refused at pre-flight in one sentence (no episode could give it its network)."""
    monkeypatch.setenv("GREETING", "from-the-host")
    compose = harbor_compose.read(make_task(tmp_path / "t"))
    assert compose is not None and [s.name for s in compose.sidecars] == ["api"]
    api = compose.sidecars[0]
    assert api.env == {"API_PORT": "8765", "GREETING": "hello-from-api"}
    assert api.mounts == [("api_log", "/var/log/api", False)] and api.healthy == []
    assert compose.main.mounts == [("api_log", "/srv/api-log", True)]
    assert compose.main.healthy == ["api"] and api.check is not None and api.interval_s == 1.0
    bind = COMPOSE.replace("- api_log:/var/log/api", "- /etc:/var/log/api")
    with pytest.raises(harbor_compose.ComposeError, match="a host folder is never shown"):
        harbor_compose.read(make_task(tmp_path / "b", bind))
    image = COMPOSE.replace("    build:\n      context: ./api\n", "    image: redis:7\n")
    with pytest.raises(harbor_compose.ComposeError, match="'redis:7' is not supported here"):
        harbor_compose.read(make_task(tmp_path / "i", image))
    hosts = COMPOSE.replace("  api:\n", '  "api\\n1.2.3.4 pypi.org":\n', 1)
    with pytest.raises(harbor_compose.ComposeError, match="is not a service name"):
        harbor_compose.read(make_task(tmp_path / "h", hosts))  # never a line of /etc/hosts
    retries = COMPOSE.replace("retries: 20", "retries: many")
    with pytest.raises(harbor_compose.ComposeError, match="cannot be read here"):
        harbor_compose.read(make_task(tmp_path / "r", retries))  # a sentence, no traceback
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    (why,) = harbor_compose.preflight(tmp_path / "t", harbor.BuildOptions())
    assert why.startswith("its compose services (api) run beside main") and "root" in why


def test_a_run_heredoc_is_one_step_with_its_lines():
    """BuildKit's `RUN python3 - <<'EOF'` (a real sidecar's key generation): the lines up to
    EOF belong to the RUN, indentation kept (before: each line was read as an instruction,
    `from cryptography...` a FROM, and the build refused)."""
    text = (
        "FROM ubuntu:24.04\nRUN python3 - <<'EOF'\nfrom pathlib import Path\nif True:\n"
        "    Path('/k').write_text('x')\nEOF\nWORKDIR /app\n"
    )
    steps = harbor._instructions(text)
    assert [w for w, _ in steps] == ["FROM", "RUN", "WORKDIR"]
    assert steps[1][1] == (
        "python3 - <<'EOF'\nfrom pathlib import Path\nif True:\n    Path('/k').write_text('x')\nEOF"
    )


MAIN_BUILD = """services:
  main:
    build:
      context: ${CONTEXT_DIR}/..
      dockerfile: ${CONTEXT_DIR}/Dockerfile
    image: ${MAIN_IMAGE_NAME}
    command: [ "sh", "-c", "sleep infinity" ]
    environment:
      - TEST_DIR=${TEST_DIR}
    volumes:
      - ${HOST_VERIFIER_LOGS_PATH}:${ENV_VERIFIER_LOGS_PATH}
      - ${HOST_AGENT_LOGS_PATH}:${ENV_AGENT_LOGS_PATH}
    deploy:
      resources:
        limits:
          cpus: ${CPUS}
          memory: ${MEMORY}
"""
"""As real Harbor tasks write it (perice-pope/expert-contributor-ai): `main` built with the
task folder as its context, so that its Dockerfile's `COPY app/ /app/` finds the task's
`app/`; Harbor's own variables, its log folders mounted, resource limits under `deploy:`."""


def make_main_build_task(root: Path, compose: str = MAIN_BUILD) -> Path:
    env = root / "environment"
    env.mkdir(parents=True)
    (env / "Dockerfile").write_text("FROM python:3.12-slim\nWORKDIR /app\nCOPY app/ /app/\n")
    (env / "docker-compose.yaml").write_text(compose)
    (root / "app").mkdir()
    (root / "app" / "secret.txt").write_text("copied-from-the-task-folder\n")
    (root / "instruction.md").write_text("Copy /app/secret.txt to /app/answer.txt.")
    (root / "task.toml").write_text('version = "1.0"\n[verifier]\ntimeout_sec = 30.0\n')
    (root / "tests").mkdir()
    (root / "tests" / "test.sh").write_text(
        "#!/bin/bash\nok=0\n[ -s /app/secret.txt ] && cmp -s /app/secret.txt /app/answer.txt"
        " && ok=1\necho $ok > /logs/verifier/reward.txt\n"
    )
    (root / "solution").mkdir()
    (root / "solution" / "solve.sh").write_text("#!/bin/bash\ncp /app/secret.txt /app/answer.txt\n")
    return root


def test_main_built_from_the_task_folder_is_read_with_harbors_variables(tmp_path):
    """`${CONTEXT_DIR}` is the task's environment/ (the build context its parent, the task
    folder; the Dockerfile by its path), Harbor's log mounts and `deploy:` limits are Harbor's
    own and left to the episode (before: `main sets build`, refused); a context that leaves
    the task folder is one sentence."""
    task = make_main_build_task(tmp_path / "t")
    compose = harbor_compose.read(task)
    assert compose is not None and compose.sidecars == [] and compose.main.mounts == []
    assert compose.main.context == task.resolve()
    assert compose.main.dockerfile == (task / "environment" / "Dockerfile").resolve()
    out = MAIN_BUILD.replace("${CONTEXT_DIR}/..", "${CONTEXT_DIR}/../..")
    with pytest.raises(harbor_compose.ComposeError, match="outside the task folder") as e:
        harbor_compose.read(make_main_build_task(tmp_path / "o", out))
    assert str(e.value).count(".") >= 1 and "\n" not in str(e.value)
    args = MAIN_BUILD.replace("      dockerfile:", "      args: {A: 1}\n      dockerfile:")
    with pytest.raises(harbor_compose.ComposeError, match="builds with \\['args'\\]"):
        harbor_compose.read(make_main_build_task(tmp_path / "a", args))
    runs = MAIN_BUILD.replace('"sleep infinity"', '"python3 -m http.server"')
    with pytest.raises(harbor_compose.ComposeError, match="main runs only the agent's"):
        harbor_compose.read(make_main_build_task(tmp_path / "c", runs))
    replicas = MAIN_BUILD.replace("      resources:", "      replicas: 2\n      resources:")
    with pytest.raises(harbor_compose.ComposeError, match="only `deploy: resources`"):
        harbor_compose.read(make_main_build_task(tmp_path / "d", replicas))
    prebuilt = MAIN_BUILD.replace("    image: ${MAIN_IMAGE_NAME}", "    image: ubuntu:24.04")
    prebuilt = prebuilt.split("    build:")[0] + "    image:" + prebuilt.split("    image:")[1]
    with pytest.raises(harbor_compose.ComposeError, match="prebuilt image 'ubuntu:24.04'"):
        harbor_compose.read(make_main_build_task(tmp_path / "p", prebuilt))


def test_main_without_a_network_is_read_as_every_episode_here_is(tmp_path):
    """QuesmaOrg/harbor-workshop's three-body-problem marks `main` airgapped with
    `network_mode: "none"`: an episode here has no network anyway, so it is read (before:
    `main sets network_mode`, refused at pre-flight, not run); a mode that asks for a
    network (`host`, `bridge`) is one sentence naming it."""
    airgapped = MAIN_BUILD + '    network_mode: "none"\n'
    compose = harbor_compose.read(make_main_build_task(tmp_path / "n", airgapped))
    assert compose is not None and compose.main.context is not None
    for mode in ("host", "bridge"):
        text = MAIN_BUILD + f"    network_mode: {mode}\n"
        with pytest.raises(harbor_compose.ComposeError) as e:
            harbor_compose.read(make_main_build_task(tmp_path / mode, text))
        assert str(e.value).endswith(
            f"service main sets `network_mode: {mode}`, which is not supported here (only "
            "`none`: an episode here has no network)"
        ), str(e.value)


@episodes
def test_main_built_from_the_task_folder_copies_its_app(tmp_path, cache):
    """The Dockerfile's `COPY app/ /app/` reads the task folder's `app/` (the context
    `${CONTEXT_DIR}/..`): the oracle copies the file to the answer, 1; noop, 0 (before: not
    run, `main sets build`, a pre-flight sentence)."""
    make_main_build_task(tmp_path / "tasks" / "mainbuild")
    done = skyrl_eval("oracle", tmp_path / "tasks", cache)
    assert "mainbuild: reward 1" in done.stdout, (done.stdout, done.stderr)
    done = skyrl_eval("noop", tmp_path / "tasks", cache)
    assert "mainbuild: reward 0" in done.stdout, (done.stdout, done.stderr)


@pytest.mark.parametrize("name", ["docker-compose.yml", "compose.yaml", "compose.yml"])
def test_only_docker_compose_yaml_is_read_as_harbor_reads(tmp_path, name):
    """Harbor's Docker environment reads `environment/docker-compose.yaml` alone (and passes
    it with `-f`), so a task with only `docker-compose.yml`, `compose.yaml` or `compose.yml`
    is a plain Dockerfile task: its prebuilt `redis:7` service is never seen (before: read,
    and the task refused at pre-flight under the name `docker-compose.yaml`)."""
    task = make_task(tmp_path / "t")
    image = COMPOSE.replace("    build:\n      context: ./api\n", "    image: redis:7\n")
    (task / "environment" / "docker-compose.yaml").rename(task / "environment" / name)
    (task / "environment" / name).write_text(image)
    assert harbor_compose.read(task) is None
    assert harbor_compose.preflight(task, harbor.BuildOptions()) == []
