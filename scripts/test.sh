#!/usr/bin/env bash
# The test command: set up what the suite needs (idempotent), then run the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# a throwaway PostgreSQL 15 on loopback for the PostgreSQL store's tests (exports ATB_TEST_PG_URL)
source scripts/services.sh
set +e
.venv/bin/python -m pytest "$@"
rc=$?
set -e
if [[ $rc -eq 5 ]]; then
  echo "pytest collected no tests: that is a failure here" >&2
  exit 1
fi
exit $rc
