#!/bin/bash
# Harbor verifier: runs in the work dir after the agent submits; writes 1 or 0 to the reward file.
# LOGS_DIR and TESTS_DIR default to Harbor's /logs/verifier and /tests (skyrl sets them).
LOGS_DIR="${LOGS_DIR:-/logs/verifier}"
TESTS_DIR="${TESTS_DIR:-/tests}"
mkdir -p "$LOGS_DIR"

# Two named rewards in reward.json (Harbor style): the file exists, and its content is right.
exists=0
correct=0
[ -f totals.csv ] && exists=1
if [ "$(cat totals.csv 2>/dev/null)" = "east,105
north,157
south,200
west,213" ]; then correct=1; fi
printf '{"file_exists": %d, "totals_correct": %d}\n' "$exists" "$correct" >"$LOGS_DIR/reward.json"
