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
printf 'def main():\n    print("app")\n' >app.py
git add app.py && git commit -q -m "Add app"
printf '# app\n' >README.md
git add README.md && git commit -q -m "Add readme"
