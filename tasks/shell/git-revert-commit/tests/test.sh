#!/bin/bash
# Harbor verifier: runs in the work dir after the agent submits; writes 1 or 0 to the reward file.
# LOGS_DIR and TESTS_DIR default to Harbor's /logs/verifier and /tests (skyrl sets them).
LOGS_DIR="${LOGS_DIR:-/logs/verifier}"
TESTS_DIR="${TESTS_DIR:-/tests}"
mkdir -p "$LOGS_DIR"

check() {
    cd repo || return 1
    [ "$(git rev-parse --abbrev-ref HEAD)" = "main" ] || return 1
    [ "$(git log --format=%s HEAD~1 | tr '\n' '|')" = "Document timeout|Break config|Add docs|Add config|" ] || return 1
    [ "$(git show HEAD:config.txt)" = "retries = 3
timeout = 30" ] || return 1
    [ "$(git show HEAD:README.md)" = "# service
Set timeout to 0 to wait forever." ] || return 1
    [ -z "$(git status --porcelain)" ]
}

if check >/dev/null 2>&1; then echo 1 >"$LOGS_DIR/reward.txt"; else echo 0 >"$LOGS_DIR/reward.txt"; fi
