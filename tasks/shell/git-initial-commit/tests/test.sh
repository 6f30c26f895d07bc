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
    git_readonly project && cd project || return 1
    [ "$(git rev-parse --abbrev-ref HEAD)" = "main" ] || return 1
    [ "$(git rev-list --count HEAD)" = "1" ] || return 1
    [ "$(git log -1 --format=%s)" = "Initial commit" ] || return 1
    [ "$(git log -1 --format='%an <%ae>')" = "Skyrl Agent <agent@example.com>" ] || return 1
    [ "$(git ls-files | sort | tr '\n' ' ')" = "README.md src/main.py " ] || return 1
    [ -z "$(git status --porcelain --ignore-submodules=all)" ]
}

if check >/dev/null 2>&1; then echo 1 >/logs/verifier/reward.txt; else echo 0 >/logs/verifier/reward.txt; fi
