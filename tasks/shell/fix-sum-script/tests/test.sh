#!/bin/bash
# Harbor verifier: runs in the work dir after the agent submits; writes 1 or 0 to the reward file.
# LOGS_DIR and TESTS_DIR default to Harbor's /logs/verifier and /tests (skyrl sets them).
LOGS_DIR="${LOGS_DIR:-/logs/verifier}"
TESTS_DIR="${TESTS_DIR:-/tests}"
mkdir -p "$LOGS_DIR"

check() {
    [ "$(bash sum.sh numbers.txt)" = "39" ] || return 1
    [ "$(bash sum.sh "$TESTS_DIR/hidden.txt")" = "1000" ] || return 1
    printf '42\n' >"$LOGS_DIR/one.txt"
    [ "$(bash sum.sh "$LOGS_DIR/one.txt")" = "42" ]
}

if check >/dev/null 2>&1; then echo 1 >"$LOGS_DIR/reward.txt"; else echo 0 >"$LOGS_DIR/reward.txt"; fi
