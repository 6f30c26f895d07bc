#!/bin/bash
# Harbor verifier: runs in the work dir after the agent submits; writes 1 or 0 to the reward file.
# LOGS_DIR and TESTS_DIR default to Harbor's /logs/verifier and /tests (skyrl sets them).
LOGS_DIR="${LOGS_DIR:-/logs/verifier}"
TESTS_DIR="${TESTS_DIR:-/tests}"
mkdir -p "$LOGS_DIR"

check() {
    gzip -t backup.tar.gz || return 1
    [ "$(tar -tzf backup.tar.gz | sed 's#^\./##; s#/$##' | sort | tr '\n' ' ')" = "data data/images data/images/logo.png data/settings.yaml data/users.csv " ] || return 1
    out="$LOGS_DIR/extracted"
    mkdir -p "$out" && tar -xzf backup.tar.gz -C "$out" || return 1
    diff -r "$out/data" data || return 1
    [ "$(cat data/users.csv)" = "id,name
1,ada
2,linus" ]
}

if check >/dev/null 2>&1; then echo 1 >"$LOGS_DIR/reward.txt"; else echo 0 >"$LOGS_DIR/reward.txt"; fi
