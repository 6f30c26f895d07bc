#!/bin/bash
# Harbor verifier: runs in /app after the agent submits; writes 1 or 0 to /logs/verifier/reward.txt.

check() {
    [ "$(cat app.conf)" = "# inventory service
name = inventory
host = 0.0.0.0
port = 9090
workers = 4
log_level = debug" ]
}

if check >/dev/null 2>&1; then echo 1 >/logs/verifier/reward.txt; else echo 0 >/logs/verifier/reward.txt; fi
