#!/usr/bin/env bash
# Sets up .venv with the test extras, makes sure headless Chromium is there for the
# UI test, and runs the whole test suite, listing the 25 slowest tests. Extra arguments
# go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh test
if ! command -v chromium >/dev/null 2>&1; then
    if [ "$(id -u)" = "0" ]; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
    else
        sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
    fi
fi
export DAGSTER_DISABLE_TELEMETRY=1
exec .venv/bin/python -m pytest -q -p no:cacheprovider --durations=25 "$@"
