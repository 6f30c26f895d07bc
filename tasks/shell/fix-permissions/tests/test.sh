#!/bin/bash
# Harbor verifier: runs in /app after the agent submits; writes 1 or 0 to /logs/verifier/reward.txt.

check() {
    [ "$(stat -c '%a %n' bin/deploy.sh secrets/api.key secrets | tr '\n' ' ')" = "755 bin/deploy.sh 600 secrets/api.key 700 secrets " ] || return 1
    # the agent's to fix the mode of, not to change: compared, never run with the verifier's rights
    [ "$(cat bin/deploy.sh)" = "$(printf '#!/bin/bash\necho deployed')" ] || return 1
    [ "$(cat secrets/api.key)" = "k-12345" ]
}

if check >/dev/null 2>&1; then echo 1 >/logs/verifier/reward.txt; else echo 0 >/logs/verifier/reward.txt; fi
