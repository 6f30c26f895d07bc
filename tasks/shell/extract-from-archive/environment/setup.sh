#!/bin/bash
# Builds release.tar.gz (Harbor: a RUN step of the Dockerfile), byte for byte the same each time.
set -euo pipefail
mkdir -p release/config release/bin
printf 'listen = 127.0.0.1:7000\nworkers = 2\n' >release/config/app.conf
printf '#!/bin/sh\necho tool\n' >release/bin/tool
printf 'Release 1.4\n' >release/README
tar --sort=name --mtime=2024-01-01 --owner=0 --group=0 --numeric-owner -cf - release \
    | gzip -n >release.tar.gz
rm -r release
