#!/usr/bin/env bash
# run_validate.sh NODE ARGS...: runs validate.mjs with NODE, skipping (77) when the npm packages that
# scripts/setup.sh installs here (npm ci) are missing.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
node="$1"
shift
for m in kubernetes-models @kubernetes-models/prometheus-operator typescript yaml; do
  if [[ ! -f "$here/node_modules/$m/package.json" ]]; then
    echo "SKIP: $here/node_modules/$m is missing (scripts/setup.sh runs npm ci there)"
    exit 77
  fi
done
exec "$node" "$here/validate.mjs" "$@"
