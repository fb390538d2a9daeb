#!/bin/sh
# Re-run the confluent-kafka column of the compatibility matrix and check it against allowlist.txt.
#   compat/suites/confluent-kafka/run.sh                    # a fresh streamgate (harness) as the target
#   compat/suites/confluent-kafka/run.sh --kafka            # ... beside Apache Kafka (../shared/kafka)
#   TARGET="--bootstrap HOST:PORT" compat/suites/confluent-kafka/run.sh [--against HOST:PORT]
# Exit 1 when an allowlisted cell fails; results go to compat/suites/confluent-kafka/results/.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
python=${PYTHON:-$root/.venv/bin/python}
cd "$root"
# shellcheck disable=SC2086  # TARGET is two words on purpose
exec "$python" -m compat.cli run ${TARGET:---streamgate} --columns confluent-kafka \
  --allowlist "$here/allowlist.txt" --output-dir "$here/results" --stem latest "$@"
