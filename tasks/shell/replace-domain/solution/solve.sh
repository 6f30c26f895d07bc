#!/bin/bash
find site -name '*.html' -exec sed -i 's/example\.com\b/example.org/g' {} +
