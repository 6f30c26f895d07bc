#!/bin/bash
mkdir -p restored
tar -xzf release.tar.gz -O release/config/app.conf >restored/app.conf
