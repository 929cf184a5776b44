#!/usr/bin/env bash
# Create bench/peer/.venv with the public macrodata-refiner library (without its Lance
# extra), for bench/peer/workloads.py. Idempotent: an existing venv with the wanted
# version is kept.
#
#   bash bench/peer/setup.sh            # the version bench/peer/VERSION names
#   PEER_VERSION=0.3.8 bash bench/peer/setup.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
version="${PEER_VERSION:-$(cat "$here/VERSION")}"
venv="$here/.venv"
python="${PYTHON:-python3.11}"

if [[ -x "$venv/bin/python" ]] &&
    [[ "$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("macrodata-refiner"))' 2>/dev/null)" == "$version" ]]; then
    echo "peer venv ready: macrodata-refiner $version in $venv"
    exit 0
fi
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip
# no extras: the plain distribution leaves out pylance (the [lance] extra)
"$venv/bin/python" -m pip install --quiet "macrodata-refiner==$version"
"$venv/bin/python" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("lance") is not None)' ||
    { echo "lance got installed into the peer venv; it should not be" >&2; exit 1; }
echo "peer venv ready: macrodata-refiner $version in $venv"
