#!/bin/bash
# Commits the starting files in two commits (Harbor: a RUN step of the Dockerfile). Fixed dates: same hashes.
set -euo pipefail
export GIT_AUTHOR_NAME="Skyrl Setup" GIT_AUTHOR_EMAIL="setup@example.com"
export GIT_COMMITTER_NAME="Skyrl Setup" GIT_COMMITTER_EMAIL="setup@example.com"
export GIT_AUTHOR_DATE="2024-01-01T12:00:00Z" GIT_COMMITTER_DATE="2024-01-01T12:00:00Z"
cd repo
git init -q -b main
git config user.name "Skyrl Agent"
git config user.email "agent@example.com"
git add app.py && git commit -q -m "Add app"
git add README.md && git commit -q -m "Add readme"
