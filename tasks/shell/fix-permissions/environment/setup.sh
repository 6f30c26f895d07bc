#!/bin/bash
# Sets the starting modes (Harbor: a RUN step of the Dockerfile); a checkout keeps only +x.
set -euo pipefail
chmod 644 bin/deploy.sh secrets/api.key
chmod 755 bin secrets
