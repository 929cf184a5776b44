#!/usr/bin/env bash
# Run the refiner demo end to end, offline: generate the synthetic robotics dataset,
# materialize every demo asset (datasets, finalizations, checks) with the Dagster CLI,
# and print where the outputs landed and how to open the UI.
#
#   scripts/demo.sh                 # state in ./.dagster_home (or $DAGSTER_HOME if set)
#   scripts/demo.sh --config-json '{"execution": {"config": {"in_process": {}}}}'
#
# Extra arguments are passed to `dagster asset materialize`.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

if [[ -n "${REFINER_PYTHON:-}" ]]; then
    PYTHON="$REFINER_PYTHON"
else
    PYTHON="$ROOT/.venv/bin/python"
    if ! [[ -x "$PYTHON" ]] || ! "$PYTHON" -c "import dagster, refiner_dagster" 2>/dev/null; then
        echo "==> Setting up .venv (first run only)"
        "$ROOT/scripts/setup.sh"
    fi
fi
if ! "$PYTHON" -c "import dagster, refiner_dagster" 2>/dev/null; then
    echo "refiner is not importable with $PYTHON; run scripts/setup.sh or set REFINER_PYTHON" >&2
    exit 2
fi
DAGSTER="$(dirname "$PYTHON")/dagster"
[[ -x "$DAGSTER" ]] || DAGSTER="dagster"

export DAGSTER_HOME="${DAGSTER_HOME:-$ROOT/.dagster_home}"
export DAGSTER_DISABLE_TELEMETRY=1
mkdir -p "$DAGSTER_HOME"
DAGSTER_HOME="$(cd "$DAGSTER_HOME" && pwd)"
if [[ ! -f "$DAGSTER_HOME/dagster.yaml" ]]; then
    printf 'telemetry:\n  enabled: false\n' > "$DAGSTER_HOME/dagster.yaml"
elif ! grep -q '^telemetry:' "$DAGSTER_HOME/dagster.yaml"; then
    printf '\ntelemetry:\n  enabled: false\n' >> "$DAGSTER_HOME/dagster.yaml"
fi

echo "==> Materializing every demo asset (DAGSTER_HOME=$DAGSTER_HOME)"
"$DAGSTER" asset materialize -m refiner_dagster.demo.definitions --select '*' "$@"

echo
echo "==> Outputs"
"$PYTHON" -m refiner_dagster.demo.report

echo
echo "==> Open the UI on the same instance:"
echo "  DAGSTER_HOME=$DAGSTER_HOME DAGSTER_DISABLE_TELEMETRY=1 $DAGSTER dev -w $ROOT/workspace.yaml"
echo "  then browse http://127.0.0.1:3000/assets/episode_dataset_repacked_finalized"
