#!/bin/bash
# Harbor verifier: runs in the work dir after the agent submits; writes 1 or 0 to the reward file.
# LOGS_DIR and TESTS_DIR default to Harbor's /logs/verifier and /tests (skyrl sets them).
LOGS_DIR="${LOGS_DIR:-/logs/verifier}"
TESTS_DIR="${TESTS_DIR:-/tests}"
mkdir -p "$LOGS_DIR"

check() {
    cd repo || return 1
    [ "$(git log --format=%s main | tr '\n' '|')" = "Add readme|Add app|" ] || return 1
    [ "$(git log --format=%s feature/login | tr '\n' '|')" = "Add login|Add readme|Add app|" ] || return 1
    [ "$(git rev-parse feature/login~1)" = "$(git rev-parse main)" ] || return 1
    [ "$(git diff --name-only main feature/login)" = "login.txt" ] || return 1
    [ "$(git show feature/login:login.txt)" = "login v1" ]
}

if check >/dev/null 2>&1; then echo 1 >"$LOGS_DIR/reward.txt"; else echo 0 >"$LOGS_DIR/reward.txt"; fi
