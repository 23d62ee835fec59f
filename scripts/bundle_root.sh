#!/usr/bin/env bash
# The folder of a bundle of deploy/bundle.sh: BUNDLE itself when it is a folder, else the tarball
# unpacked into OUT/bundle/. Prints the folder; exits 2 when it holds no bin/ablated.
#   scripts/bundle_root.sh BUNDLE OUT
set -euo pipefail
bundle="${1:?usage: bundle_root.sh BUNDLE OUT}"
out="${2:?usage: bundle_root.sh BUNDLE OUT}"
if [[ -d "$bundle" ]]; then
  root="$(cd "$bundle" && pwd)"
else
  mkdir -p "$out/bundle"
  tar -C "$out/bundle" -xzf "$bundle"
  root="$(find "$out/bundle" -mindepth 1 -maxdepth 1 -type d | head -1)"
fi
[[ -x "$root/bin/ablated" ]] || { echo "bundle_root: $root/bin/ablated missing (not a bundle?)" >&2; exit 2; }
echo "$root"
