#!/bin/bash
# Harbor verifier: runs in /app after the agent submits; writes 1 or 0 to /logs/verifier/reward.txt.

check() {
    [ "$(sed -e 's/^[[:space:]]*//' -e 's/[[:space:]]\+/ /g' -e 's/[[:space:]]*$//' top_ips.txt)" = "30 10.0.0.1
22 10.0.0.3
17 10.0.0.7" ]
}

if check >/dev/null 2>&1; then echo 1 >/logs/verifier/reward.txt; else echo 0 >/logs/verifier/reward.txt; fi
