#!/usr/bin/env bash
# The run command: set up, build, and run the main job. Today that is ablate-train on the quickstart
# trial (examples/trials/quickstart.yaml) with the CPU backend: a 4-layer byte-level GPT with SageBwd
# attention and the spectral optimizer on the Brown corpus, about 1.5 minutes on 2 cores. Metrics
# stream to stdout as JSON lines and to out/quickstart/metrics.jsonl; checkpoints land in
# out/quickstart/checkpoints/. Pass another trial config as the first argument to train that instead.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
config="${1:-$root/examples/trials/quickstart.yaml}"
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
build="${ABLATE_BUILD_DIR:-$root/build}"
name="$(basename "$config" .yaml)"
rm -rf "$root/out/$name"
exec "$build/worker/trainer/ablate-train" --config "$config" --out "$root/out/$name"
