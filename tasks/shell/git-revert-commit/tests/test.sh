#!/bin/bash
# Harbor verifier: runs in /app after the agent submits; writes 1 or 0 to /logs/verifier/reward.txt.

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

if check >/dev/null 2>&1; then echo 1 >/logs/verifier/reward.txt; else echo 0 >/logs/verifier/reward.txt; fi
