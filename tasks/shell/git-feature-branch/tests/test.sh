#!/bin/bash
# Harbor verifier: runs in /app after the agent submits; writes 1 or 0 to /logs/verifier/reward.txt.

# git runs commands that a repository's own config names (core.fsmonitor, filters, gpg.program),
# and this repository is the agent's: it is read through a copy of its .git without config, hooks
# or info, so nothing the agent wrote runs with the verifier's rights.
git_readonly() {
    local copy
    copy=$(mktemp -d) && cp -R "$1/.git/." "$copy/" || return 1
    rm -rf "$copy/config" "$copy/config.worktree" "$copy/commondir" "$copy/hooks" "$copy/info"
    export GIT_DIR="$copy" GIT_WORK_TREE="$PWD/$1" GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
}

check() {
    git_readonly repo && cd repo || return 1
    # main is the starting history untouched (fixed dates: a fixed hash), and the branch's base
    [ "$(git rev-parse main feature/login~1 | uniq)" = 16a149946219338c8fc4f46885274a1f17a06351 ] || return 1
    [ "$(git log -1 --format=%s feature/login)" = "Add login" ] || return 1
    [ "$(git diff --name-only main feature/login)" = "login.txt" ] || return 1
    [ "$(git show feature/login:login.txt)" = "login v1" ]
}

if check >/dev/null 2>&1; then echo 1 >/logs/verifier/reward.txt; else echo 0 >/logs/verifier/reward.txt; fi
