#!/bin/bash
# Harbor verifier: runs in the work dir after the agent submits; writes 1 or 0 to the reward file.
# LOGS_DIR and TESTS_DIR default to Harbor's /logs/verifier and /tests (skyrl sets them).
LOGS_DIR="${LOGS_DIR:-/logs/verifier}"
TESTS_DIR="${TESTS_DIR:-/tests}"
mkdir -p "$LOGS_DIR"

check() {
    [ "$(cat restored/app.conf)" = "listen = 127.0.0.1:7000
workers = 2" ] || return 1
    [ "$(ls restored)" = "app.conf" ] || return 1
    [ ! -e release ] || return 1
    [ "$(tar -tzf release.tar.gz | wc -l)" -ge 5 ]
}

if check >/dev/null 2>&1; then echo 1 >"$LOGS_DIR/reward.txt"; else echo 0 >"$LOGS_DIR/reward.txt"; fi
