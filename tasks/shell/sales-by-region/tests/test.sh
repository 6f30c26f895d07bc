#!/bin/bash
# Harbor verifier: runs in /app after the agent submits; writes two named rewards
# to /logs/verifier/reward.json (Harbor style): the file exists, and its content is right.
exists=0
correct=0
[ -f totals.csv ] && exists=1
if [ "$(cat totals.csv 2>/dev/null)" = "east,105
north,157
south,200
west,213" ]; then correct=1; fi
printf '{"file_exists": %d, "totals_correct": %d}\n' "$exists" "$correct" >/logs/verifier/reward.json
