#!/bin/sh
# Refresh the vendored uPlot from the npm registry: sh server/console/vendor/refresh.sh 1.6.32
set -eu
version="${1:?usage: refresh.sh VERSION (e.g. 1.6.32)}"
here="$(cd "$(dirname "$0")" && pwd)"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
(cd "$scratch" && npm init -y >/dev/null && npm install --no-audit --no-fund "uplot@$version" >/dev/null)
cp "$scratch/node_modules/uplot/dist/uPlot.iife.min.js" "$scratch/node_modules/uplot/dist/uPlot.min.css" "$here/"
cp "$scratch/node_modules/uplot/LICENSE" "$here/LICENSE.uPlot"
sha256sum "$here/uPlot.iife.min.js" "$here/uPlot.min.css" "$here/LICENSE.uPlot"
