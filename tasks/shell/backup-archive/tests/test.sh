#!/bin/bash
# Harbor verifier: runs in /app after the agent submits; writes 1 or 0 to /logs/verifier/reward.txt.

check() {
    gzip -t backup.tar.gz || return 1
    [ "$(tar -tzf backup.tar.gz | sed 's#^\./##; s#/$##' | sort | tr '\n' ' ')" = "data data/images data/images/logo.png data/settings.yaml data/users.csv " ] || return 1
    out=$(mktemp -d)  # not in /logs/verifier: the agent's archive is extracted nowhere near the reward
    mkdir -p "$out" && tar -xzf backup.tar.gz -C "$out" || return 1
    diff -r "$out/data" data || return 1
    [ "$(cat data/users.csv)" = "id,name
1,ada
2,linus" ]
}

if check >/dev/null 2>&1; then echo 1 >/logs/verifier/reward.txt; else echo 0 >/logs/verifier/reward.txt; fi
