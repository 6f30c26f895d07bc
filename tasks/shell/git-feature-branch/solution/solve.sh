#!/bin/bash
cd repo
git checkout -q -b feature/login main
echo "login v1" >login.txt
git add login.txt
git commit -q -m "Add login"
