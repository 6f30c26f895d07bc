#!/bin/bash
# Harbor verifier: runs in the work dir after the agent submits; writes 1 or 0 to the reward file.
# LOGS_DIR and TESTS_DIR default to Harbor's /logs/verifier and /tests (skyrl sets them).
LOGS_DIR="${LOGS_DIR:-/logs/verifier}"
TESTS_DIR="${TESTS_DIR:-/tests}"
mkdir -p "$LOGS_DIR"

check() {
    cd project || return 1
    [ "$(git rev-parse --abbrev-ref HEAD)" = "main" ] || return 1
    [ "$(git rev-list --count HEAD)" = "1" ] || return 1
    [ "$(git log -1 --format=%s)" = "Initial commit" ] || return 1
    [ "$(git log -1 --format='%an <%ae>')" = "Skyrl Agent <agent@example.com>" ] || return 1
    [ "$(git ls-files | sort | tr '\n' ' ')" = "README.md src/main.py " ] || return 1
    [ -z "$(git status --porcelain)" ]
}

if check >/dev/null 2>&1; then echo 1 >"$LOGS_DIR/reward.txt"; else echo 0 >"$LOGS_DIR/reward.txt"; fi
