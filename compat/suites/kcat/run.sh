#!/bin/sh
# Re-run the kcat column of the compatibility matrix and check it against allowlist.txt.
#   compat/suites/kcat/run.sh                    # a fresh streamgate (harness) as the target
#   compat/suites/kcat/run.sh --kafka            # ... beside Apache Kafka (../shared/kafka)
#   TARGET="--bootstrap HOST:PORT" compat/suites/kcat/run.sh [--against HOST:PORT]
# Exit 1 when an allowlisted cell fails; results go to compat/suites/kcat/results/.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
python=${PYTHON:-$root/.venv/bin/python}
cd "$root"
# shellcheck disable=SC2086  # TARGET is two words on purpose
exec "$python" -m compat.cli run ${TARGET:---streamgate} --columns kcat \
  --allowlist "$here/allowlist.txt" --output-dir "$here/results" --stem latest "$@"
