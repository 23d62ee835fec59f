#!/usr/bin/env bash
# Relocatable bundle: binaries plus the shared libraries they need, for a machine that has only the
# NVIDIA driver and the CUDA runtime (GPU.md, "Build here, take the binaries").
#   deploy/bundle.sh BUILD_DIR OUT_DIR [BINARY...]
# BINARY paths are relative to BUILD_DIR (default: the four programs). Copies each into OUT_DIR/bin
# and every library `ldd` lists into OUT_DIR/lib, except the C/C++ runtime and the CUDA driver,
# runtime, cuBLAS and NCCL, which the target machine provides. Run with
#   LD_LIBRARY_PATH=OUT_DIR/lib:/usr/local/cuda/lib64 OUT_DIR/bin/<program>
set -euo pipefail
build="${1:?usage: deploy/bundle.sh BUILD_DIR OUT_DIR [BINARY...]}"
out="${2:?usage: deploy/bundle.sh BUILD_DIR OUT_DIR [BINARY...]}"
shift 2
bins=("$@")
if ((${#bins[@]} == 0)); then
  bins=(server/ablated worker/agent/ablate-worker worker/trainer/ablate-train cli/ablate)
fi
skip='^(libc|libm|libpthread|libdl|librt|ld-linux.*|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas.*|libnccl|linux-vdso)\.so'
mkdir -p "$out/bin" "$out/lib"
for b in "${bins[@]}"; do
  [[ -x "$build/$b" ]] || { echo "bundle: $build/$b is not built" >&2; exit 1; }
  cp -f "$build/$b" "$out/bin/"
  ldd "$build/$b" | awk '/=> \//{print $1, $3}' | while read -r name path; do
    if [[ ! "$name" =~ $skip ]]; then cp -fL "$path" "$out/lib/$name"; fi
  done
done
echo "bundle: $(ls "$out/bin" | wc -l) programs, $(ls "$out/lib" | wc -l) libraries, $(du -sh "$out" | cut -f1) in $out"
