#!/bin/bash
# Harbor verifier: runs in /app after the agent submits; writes 1 or 0 to /logs/verifier/reward.txt.
# The task is the agent's sum.sh, so it runs here with this script's rights: it runs first, under
# a time limit, its output kept; then every process it left is ended (skyrl runs this script as
# pid 1, which kill -1 spares, as it spares the caller) and every file it wrote in /logs/verifier
# is removed, before this script alone decides.

input=$(mktemp -d)
printf '42\n' >"$input/one.txt"
cp /tests/hidden.txt "$input/hidden.txt"
a=$(timeout 10 bash sum.sh numbers.txt 2>/dev/null </dev/null)
b=$(timeout 10 bash sum.sh "$input/hidden.txt" 2>/dev/null </dev/null)
c=$(timeout 10 bash sum.sh "$input/one.txt" 2>/dev/null </dev/null)
if [ "$$" -eq 1 ]; then kill -9 -1 2>/dev/null; fi
find /logs/verifier -mindepth 1 ! -name test-stdout.txt -exec rm -rf {} + 2>/dev/null

if [ "$a" = 39 ] && [ "$b" = 1000 ] && [ "$c" = 42 ]; then
    echo 1 >/logs/verifier/reward.txt
else
    echo 0 >/logs/verifier/reward.txt
fi
