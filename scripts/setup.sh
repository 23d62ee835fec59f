#!/usr/bin/env bash
# Installs everything ablate needs to build and run on Debian 12 (as root, or with sudo), then fetches
# the built-in corpora. Idempotent: packages already present are not reinstalled, and apt-get update
# runs only when something is missing.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

packages=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libboost-dev
  libopenblas-dev liblapacke-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc libsqlite3-dev
  libgtest-dev libgmock-dev
  clang libclang-rt-14-dev libomp-dev
  python3 python3-matplotlib
  nodejs npm
  prometheus-cpp-dev libcpp-httplib-dev prometheus
  chromium iproute2
  patchelf openssl ccache
  slurmctld slurmd slurm-client munge
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# A node/npm installed outside Debian's packages (nodesource, nvm) is fine too.
if command -v npm >/dev/null 2>&1; then
  keep=()
  for p in "${missing[@]}"; do [[ "$p" == nodejs || "$p" == npm ]] || keep+=("$p"); done
  missing=("${keep[@]}")
fi

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""
  [[ $(id -u) -eq 0 ]] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

"$here/fetch_corpora.sh"

# The dashboard's npm packages (uPlot, served by ablated from web/node_modules) and the browser
# test's (playwright-core, driving Debian's chromium). `npm ci` only when node_modules is missing
# or older than the lock file.
for dir in "$here/../web" "$here/../tests/browser"; do
  if [[ -f "$dir/package-lock.json" && ! "$dir/node_modules/.package-lock.json" -nt "$dir/package-lock.json" ]]; then
    echo "setup: npm ci in ${dir#"$here/../"}" >&2
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
  fi
done

# The Kubernetes manifest validator's npm packages (tests/deploy/k8s: the Kubernetes and Prometheus
# Operator schemas, TypeScript for the unknown-field check). Same rule: only when out of date.
k8s="$here/../tests/deploy/k8s"
if [[ -f "$k8s/package-lock.json" && ! "$k8s/node_modules/.package-lock.json" -nt "$k8s/package-lock.json" ]]; then
  echo "setup: npm ci in tests/deploy/k8s" >&2
  (cd "$k8s" && npm ci --no-audit --no-fund --loglevel=error)
fi
