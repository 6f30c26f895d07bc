#!/bin/bash
cd project
git init -q -b main
git config user.name "Skyrl Agent"
git config user.email "agent@example.com"
git add -A
git commit -q -m "Initial commit"
