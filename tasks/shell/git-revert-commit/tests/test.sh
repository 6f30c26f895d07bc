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
    [ "$(git rev-parse --abbrev-ref HEAD)" = "main" ] || return 1
    [ "$(git log --format=%s HEAD~1 | tr '\n' '|')" = "Document timeout|Break config|Add docs|Add config|" ] || return 1
    [ "$(git show HEAD:config.txt)" = "retries = 3
timeout = 30" ] || return 1
    [ "$(git show HEAD:README.md)" = "# service
Set timeout to 0 to wait forever." ] || return 1
    [ -z "$(git status --porcelain --ignore-submodules=all)" ]
}

if check >/dev/null 2>&1; then echo 1 >/logs/verifier/reward.txt; else echo 0 >/logs/verifier/reward.txt; fi
