#!/usr/bin/env bash
# The test command: set up what the suite needs (idempotent), then run the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# a throwaway PostgreSQL 15 on loopback for the PostgreSQL store's tests (exports ATB_TEST_PG_URL)
source scripts/services.sh
set +e
# Two workers, one test file each at a time (--dist loadfile): a file's tests keep their order and its
# module-scoped fixtures (sandboxes, Ray cluster, measurement sessions) are built once. 26 min serial,
# about 15 min so on the 2-core CI machine. ATB_TEST_WORKERS=0 runs serially; a later -n in "$@" wins.
# --no-loadscope-reorder: tests/conftest.py orders the files (the heaviest first; see HEAVY_FILES_FIRST).
.venv/bin/python -m pytest -n "${ATB_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder "$@"
rc=$?
set -e
if [[ $rc -eq 5 ]]; then
  echo "pytest collected no tests: that is a failure here" >&2
  exit 1
fi
exit $rc
