#!/bin/bash
# Harbor verifier: runs in /app after the agent submits; writes 1 or 0 to /logs/verifier/reward.txt.

check() {
    [ "$(cd docs && ls | sort | tr '\n' ' ')" = "faq.md install.md notes.log usage.md " ] || return 1
    [ "$(cat docs/install.md)" = "# Install
Run make install." ] || return 1
    [ "$(cat docs/usage.md)" = "# Usage
Run the tool with --help." ] || return 1
    [ "$(cat docs/faq.md)" = "# FAQ
Nothing yet." ] || return 1
    [ "$(cat docs/notes.log)" = "keep me as I am" ]
}

if check >/dev/null 2>&1; then echo 1 >/logs/verifier/reward.txt; else echo 0 >/logs/verifier/reward.txt; fi
