#!/bin/bash
# Harbor verifier: runs in /app after the agent submits; writes 1 or 0 to /logs/verifier/reward.txt.

check() {
    [ "$(cat restored/app.conf)" = "listen = 127.0.0.1:7000
workers = 2" ] || return 1
    [ "$(ls restored)" = "app.conf" ] || return 1
    [ ! -e release ] || return 1
    [ "$(tar -tzf release.tar.gz | wc -l)" -ge 5 ]
}

if check >/dev/null 2>&1; then echo 1 >/logs/verifier/reward.txt; else echo 0 >/logs/verifier/reward.txt; fi
