#!/usr/bin/env bash
# Run the refiner demo end to end, offline: generate the synthetic robotics dataset,
# materialize every demo asset (datasets, finalizations, checks) with one
# `dagster asset materialize` on the Dagster instance (in-process executor), then print
# the steps, where the outputs landed, the key counters and the checks.
#
#   scripts/demo.sh              # state in ./.dagster_home (or $DAGSTER_HOME if set)
#   scripts/demo.sh --verbose    # also stream Dagster's full event log
#   scripts/demo.sh --config-json '{"execution": {"config": {"multiprocess": {}}}}'
#
# Other arguments are passed to `dagster asset materialize`. The full log of the last
# run is kept in $DAGSTER_HOME/logs/demo-materialize.log either way.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

VERBOSE=0
ARGS=()
HAS_CONFIG=0
for arg in "$@"; do
    case "$arg" in
        -v | --verbose) VERBOSE=1 ;;
        -c | --config | --config-json | --config-json=* | --config=*) HAS_CONFIG=1; ARGS+=("$arg") ;;
        *) ARGS+=("$arg") ;;
    esac
done
if [[ "$HAS_CONFIG" == 0 ]]; then
    # One process for every step: the demo's 24 rows do not need a process per step.
    ARGS+=(--config-json '{"execution": {"config": {"in_process": {}}}}')
fi

# Whether refiner and dagster are installed for $1 (found, not imported: that takes seconds).
installed() {
    "$1" -c 'import importlib.util as u, sys
sys.exit(not all(u.find_spec(m) for m in ("dagster", "refiner_dagster", "refiner_core")))' 2>/dev/null
}

if [[ -n "${REFINER_PYTHON:-}" ]]; then
    PYTHON="$REFINER_PYTHON"
else
    PYTHON="$ROOT/.venv/bin/python"
    if ! [[ -x "$PYTHON" ]] || ! installed "$PYTHON"; then
        echo "==> Setting up .venv (first run only)"
        bash "$ROOT/scripts/setup.sh"
    fi
fi
if ! installed "$PYTHON"; then
    echo "refiner is not importable with $PYTHON; run scripts/setup.sh or set REFINER_PYTHON" >&2
    exit 2
fi
BIN="$(dirname "$PYTHON")"
DAGSTER="$BIN/dagster"
[[ -x "$DAGSTER" ]] || DAGSTER="dagster"
REFINER="$BIN/refiner"
[[ -x "$REFINER" ]] || REFINER="refiner"

export DAGSTER_HOME="${DAGSTER_HOME:-$ROOT/.dagster_home}"
export DAGSTER_DISABLE_TELEMETRY=1
mkdir -p "$DAGSTER_HOME/logs"
DAGSTER_HOME="$(cd "$DAGSTER_HOME" && pwd)"
SETTINGS="$DAGSTER_HOME/dagster.yaml"
touch "$SETTINGS"
# Telemetry off, and no "join the community" dialog over the UI of the demo's instance.
grep -q '^telemetry:' "$SETTINGS" || printf '\ntelemetry:\n  enabled: false\n' >> "$SETTINGS"
grep -q '^nux:' "$SETTINGS" || printf '\nnux:\n  enabled: false\n' >> "$SETTINGS"

LOG="$DAGSTER_HOME/logs/demo-materialize.log"
echo "==> dagster asset materialize --select '*' (DAGSTER_HOME=$DAGSTER_HOME)"
started=$SECONDS
if [[ "$VERBOSE" == 1 ]]; then
    "$DAGSTER" asset materialize -m refiner_dagster.demo.definitions --select '*' "${ARGS[@]}" \
        2>&1 | tee "$LOG"
    status=${PIPESTATUS[0]}
else
    status=0
    "$DAGSTER" asset materialize -m refiner_dagster.demo.definitions --select '*' "${ARGS[@]}" \
        >"$LOG" 2>&1 || status=$?
fi
if [[ "$status" != 0 ]]; then
    echo "dagster asset materialize failed (exit $status); the end of its log ($LOG):" >&2
    tail -n 40 "$LOG" >&2
    exit "$status"
fi
echo "    done in $((SECONDS - started)) s; full log: $LOG (or run with --verbose)"
echo

"$PYTHON" -m refiner_dagster.demo.report

echo
echo "==> Look inside an output:  $REFINER inspect <path above>   (also: verify, preview --html)"
echo "==> Open the UI on the same instance (sensor and schedule start stopped; turn them on there):"
echo "  DAGSTER_HOME=$DAGSTER_HOME DAGSTER_DISABLE_TELEMETRY=1 $DAGSTER dev -w $ROOT/workspace.yaml"
echo "  then browse http://127.0.0.1:3000/assets/episode_dataset_repacked_finalized"
