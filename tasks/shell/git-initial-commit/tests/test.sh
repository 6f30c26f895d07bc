#!/bin/bash
# Harbor verifier: runs in /app after the agent submits; writes 1 or 0 to /logs/verifier/reward.txt.

check() {
    cd project || return 1
    [ "$(git rev-parse --abbrev-ref HEAD)" = "main" ] || return 1
    [ "$(git rev-list --count HEAD)" = "1" ] || return 1
    [ "$(git log -1 --format=%s)" = "Initial commit" ] || return 1
    [ "$(git log -1 --format='%an <%ae>')" = "Skyrl Agent <agent@example.com>" ] || return 1
    [ "$(git ls-files | sort | tr '\n' ' ')" = "README.md src/main.py " ] || return 1
    [ -z "$(git status --porcelain)" ]
}

if check >/dev/null 2>&1; then echo 1 >/logs/verifier/reward.txt; else echo 0 >/logs/verifier/reward.txt; fi
