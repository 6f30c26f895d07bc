#!/bin/bash
# Harbor verifier: runs in /app after the agent submits; writes 1 or 0 to /logs/verifier/reward.txt.

check() {
    [ "$(cat site/index.html)" = '<a href="https://example.org/">Home</a>
<a href="https://example.org/about">About</a>' ] || return 1
    [ "$(cat site/contact.html)" = '<p>Mail us at team@example.org</p>' ] || return 1
    [ "$(cat site/blog/index.html)" = '<a href="https://example.org/blog/1">First post</a>
<p>example.community is another site.</p>' ] || return 1
    [ "$(cat site/LICENSE)" = 'Copyright example.com authors' ]
}

if check >/dev/null 2>&1; then echo 1 >/logs/verifier/reward.txt; else echo 0 >/logs/verifier/reward.txt; fi
