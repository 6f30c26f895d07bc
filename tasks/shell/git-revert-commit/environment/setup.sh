#!/bin/bash
# Builds the starting repository (Harbor: a RUN step of the Dockerfile). Fixed dates: same hashes.
set -euo pipefail
export GIT_AUTHOR_NAME="Skyrl Setup" GIT_AUTHOR_EMAIL="setup@example.com"
export GIT_COMMITTER_NAME="Skyrl Setup" GIT_COMMITTER_EMAIL="setup@example.com"
export GIT_AUTHOR_DATE="2024-01-01T12:00:00Z" GIT_COMMITTER_DATE="2024-01-01T12:00:00Z"
mkdir repo && cd repo
git init -q -b main
git config user.name "Skyrl Agent"
git config user.email "agent@example.com"
printf 'retries = 3\ntimeout = 30\n' >config.txt
git add config.txt && git commit -q -m "Add config"
printf '# service\n' >README.md
git add README.md && git commit -q -m "Add docs"
printf 'retries = 3\ntimeout = 0\n' >config.txt
git commit -q -am "Break config"
printf 'Set timeout to 0 to wait forever.\n' >>README.md
git commit -q -am "Document timeout"
