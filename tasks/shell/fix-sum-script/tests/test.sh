#!/bin/bash
# Harbor verifier: runs in /app after the agent submits; writes 1 or 0 to /logs/verifier/reward.txt.

check() {
    [ "$(bash sum.sh numbers.txt)" = "39" ] || return 1
    [ "$(bash sum.sh /tests/hidden.txt)" = "1000" ] || return 1
    printf '42\n' >/logs/verifier/one.txt
    [ "$(bash sum.sh /logs/verifier/one.txt)" = "42" ]
}

if check >/dev/null 2>&1; then echo 1 >/logs/verifier/reward.txt; else echo 0 >/logs/verifier/reward.txt; fi
