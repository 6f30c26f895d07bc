#!/bin/bash
# Harbor verifier: runs in the work dir after the agent submits; writes 1 or 0 to the reward file.
# LOGS_DIR and TESTS_DIR default to Harbor's /logs/verifier and /tests (skyrl sets them).
LOGS_DIR="${LOGS_DIR:-/logs/verifier}"
TESTS_DIR="${TESTS_DIR:-/tests}"
mkdir -p "$LOGS_DIR"

check() {
    [ "$(cd docs && ls | sort | tr '\n' ' ')" = "faq.md install.md notes.log usage.md " ] || return 1
    [ "$(cat docs/install.md)" = "# Install
Run make install." ] || return 1
    [ "$(cat docs/usage.md)" = "# Usage
Run the tool with --help." ] || return 1
    [ "$(cat docs/faq.md)" = "# FAQ
Nothing yet." ] || return 1
    [ "$(cat docs/notes.log)" = "keep me as I am" ]
}

if check >/dev/null 2>&1; then echo 1 >"$LOGS_DIR/reward.txt"; else echo 0 >"$LOGS_DIR/reward.txt"; fi
