#!/bin/bash
chmod 755 bin/deploy.sh
chmod 600 secrets/api.key
chmod 700 secrets
