#!/bin/bash
for f in docs/*.txt; do
    mv "$f" "${f%.txt}.md"
done
