#!/bin/bash
# Harbor verifier: runs in the work dir after the agent submits; writes 1 or 0 to the reward file.
# LOGS_DIR and TESTS_DIR default to Harbor's /logs/verifier and /tests (skyrl sets them).
LOGS_DIR="${LOGS_DIR:-/logs/verifier}"
TESTS_DIR="${TESTS_DIR:-/tests}"
mkdir -p "$LOGS_DIR"

check() {
    [ "$(cat site/index.html)" = '<a href="https://example.org/">Home</a>
<a href="https://example.org/about">About</a>' ] || return 1
    [ "$(cat site/contact.html)" = '<p>Mail us at team@example.org</p>' ] || return 1
    [ "$(cat site/blog/index.html)" = '<a href="https://example.org/blog/1">First post</a>
<p>example.community is another site.</p>' ] || return 1
    [ "$(cat site/LICENSE)" = 'Copyright example.com authors' ]
}

if check >/dev/null 2>&1; then echo 1 >"$LOGS_DIR/reward.txt"; else echo 0 >"$LOGS_DIR/reward.txt"; fi
