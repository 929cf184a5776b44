#!/usr/bin/env bash
# Creates (once) a separate virtualenv holding the LeRobot client, for the tests that check
# read_lerobot against datasets LeRobot itself wrote. refiner never imports lerobot.
#
# Usage: scripts/lerobot_env.sh    prints the venv's python path on stdout, progress on stderr.
#
# The venv lives at $REFINER_LEROBOT_VENV (default ~/.cache/refiner/lerobot-venv). A marker
# file is written only after the install and an import check succeeded, so a second run is a
# no-op and an interrupted one starts over. The interpreter is $REFINER_BOOTSTRAP_PYTHON if
# set, else python3.11.
set -euo pipefail

LEROBOT_VERSION="0.4.2"
venv="${REFINER_LEROBOT_VENV:-$HOME/.cache/refiner/lerobot-venv}"
marker="$venv/.refiner-lerobot-$LEROBOT_VERSION"

say() { echo "lerobot_env: $*" >&2; }

if [[ -f "$marker" && -x "$venv/bin/python" ]]; then
    echo "$venv/bin/python"
    exit 0
fi

# One build at a time (e.g. parallel test workers): the others wait, then find the marker.
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
if command -v flock >/dev/null 2>&1; then
    flock 9
fi
if [[ -f "$marker" && -x "$venv/bin/python" ]]; then
    echo "$venv/bin/python"
    exit 0
fi

python="${REFINER_BOOTSTRAP_PYTHON:-$(command -v python3.11 || true)}"
if [[ -z "$python" ]]; then
    say "needs Python 3.11: install it (apt-get install python3.11 python3.11-venv)"
    say "or point REFINER_BOOTSTRAP_PYTHON at a Python 3.11 interpreter"
    exit 2
fi

say "creating $venv with $python (lerobot==$LEROBOT_VERSION and torch: several GB, minutes)"
rm -rf "$venv"
if ! "$python" -m venv "$venv"; then
    rm -rf "$venv"
    say "$python cannot create a virtualenv: install python3.11-venv"
    exit 2
fi
if ! "$venv/bin/python" -m pip install -q --disable-pip-version-check "lerobot==$LEROBOT_VERSION"; then
    say "pip could not install lerobot==$LEROBOT_VERSION into $venv (see the pip error above)"
    exit 3
fi
if ! "$venv/bin/python" -c "from lerobot.datasets.lerobot_dataset import LeRobotDataset" >&2; then
    say "lerobot==$LEROBOT_VERSION installed into $venv but does not import (see the error above)"
    exit 3
fi
touch "$marker"
echo "$venv/bin/python"
