#!/usr/bin/env bash
# A lab variant of ablate-attention-bench: the bench built from a build tree with a patch applied
# to copies of the kernel sources, outside the source and the build trees, for a same-run A/B
# against the unpatched bench (ab_run.sh) without a branch or a variant in production code. The
# way to time what one stage of a kernel costs without hardware counters: a patch that leaves the
# stage out (or does it twice), then the difference.
#   kernels/bench/variant_bench.sh BUILD_DIR PATCH NAME OUT_DIR
# BUILD_DIR: a configured CUDA build tree (Ninja); its ablate-attention-bench is brought up to date
# first. PATCH: a unified diff (git diff, paths a/kernels/... b/kernels/...) of files under
# kernels/. Every object of the bench whose recorded dependencies (ninja -t deps) include a
# patched file is compiled again by its own build command, with the patched copies first on the
# include path (and as the source, where the patch changes the .cu itself); the archives holding
# those objects and the bench are then re-made from their own commands with the new objects.
# Writes OUT_DIR/bench-NAME (a distinct file name for ab_run.sh) and OUT_DIR/NAME/ (the patched
# sources, the objects, objects.txt: the objects compiled again, build.log).
set -euo pipefail
usage="usage: variant_bench.sh BUILD_DIR PATCH NAME OUT_DIR"
[ "$#" -eq 4 ] || { echo "$usage" >&2; exit 2; }
build="$(cd "$1" && pwd -P)" || { echo "variant_bench.sh: no build tree $1" >&2; exit 2; }
[ -f "$2" ] || { echo "variant_bench.sh: no patch file $2" >&2; exit 2; }
patch_file="$(realpath "$2")"
name="$3"
case "$name" in
  "" | *[!A-Za-z0-9_-]*) echo "variant_bench.sh: NAME '$name': letters, digits, _ and - only" >&2; exit 2 ;;
esac
mkdir -p "$4"
out="$(cd "$4" && pwd)"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)"
target=tests/gpu/kernels/attention/ablate-attention-bench
[ -f "$build/build.ninja" ] || { echo "variant_bench.sh: $build is not a Ninja build tree" >&2; exit 2; }
grep -q "^build $target:" "$build/build.ninja" ||
  { echo "variant_bench.sh: $build has no $target (a CUDA build: ABLATE_CUDA on)" >&2; exit 2; }

work="$out/$name"
rm -rf "$work"
mkdir -p "$work/src" "$work/obj"
log="$work/build.log"
: >"$log"

# The patched files (b/ side), each under kernels/ and present in the repository.
mapfile -t files < <(sed -n 's|^+++ b/||p' "$patch_file" | sed 's/\t.*//' | sort -u)
[ "${#files[@]}" -gt 0 ] || { echo "variant_bench.sh: $patch_file patches no file (+++ b/PATH lines)" >&2; exit 2; }
for f in "${files[@]}"; do
  case "$f" in
    kernels/*) ;;
    *) echo "variant_bench.sh: $f: the patch may touch files under kernels/ only" >&2; exit 2 ;;
  esac
  case "/$f/" in */../*) echo "variant_bench.sh: $f: no '..' in paths" >&2; exit 2 ;; esac
  [ -f "$repo/$f" ] || { echo "variant_bench.sh: $f: not a file of the repository" >&2; exit 2; }
  mkdir -p "$work/src/$(dirname "$f")"
  cp "$repo/$f" "$work/src/$f"
done
patch -d "$work/src" -p1 --forward --no-backup-if-mismatch -s <"$patch_file" >>"$log" 2>&1 ||
  { echo "variant_bench.sh: the patch does not apply (see $log)" >&2; cat "$log" >&2; exit 1; }

ninja -C "$build" "$target" >>"$log" 2>&1 || { echo "variant_bench.sh: building $target failed (see $log)" >&2; exit 1; }
mapfile -t cmds < <(ninja -C "$build" -t commands "$target")

declare -A objmap=() libmap=()
cd "$build"
for cmd in "${cmds[@]}"; do
  if [[ "$cmd" =~ \ -c\ ([^ ]+)\ -o\ ([^ ]+)$ ]]; then  # a compile: ... -c SRC -o OBJ
    src="${BASH_REMATCH[1]}" obj="${BASH_REMATCH[2]}"
    # The recorded dependencies, absolute (a compiler cache's base directory makes them relative
    # to the build tree).
    deps="$(ninja -t deps "$obj" | sed -n 's/^    //p' | (cd "$build" && xargs -r realpath -m))"
    hit=0
    for f in "${files[@]}"; do
      grep -qxF "$repo/$f" <<<"$deps" && hit=1
    done
    [ "$hit" -eq 1 ] || continue
    new="$work/obj/$(basename "$obj")"
    [ ! -e "$new" ] || { echo "variant_bench.sh: two objects named $(basename "$obj")" >&2; exit 1; }
    objmap[$obj]="$new"
    nsrc="$src"
    for f in "${files[@]}"; do [ "$(realpath -m "$src")" != "$repo/$f" ] || nsrc="$work/src/$f"; done
    # Without the dependency-file flags (they would write into the build tree), the patched copies
    # first on the include path, the object out of the build tree.
    c="$(sed -E 's/ -MD//; s/ -MT [^ ]+//; s/ -MF [^ ]+//' <<<"$cmd")"
    c="${c/ -I/ -I$work/src/kernels -I}"
    c="${c% -c $src -o $obj} -c $nsrc -o $new"
    echo "$obj" >>"$work/objects.txt"
    echo "+ $c" >>"$log"
    bash -c "$c" >>"$log" 2>&1 || { echo "variant_bench.sh: compiling $src failed (see $log)" >&2; exit 1; }
  fi
done
[ "${#objmap[@]}" -gt 0 ] ||
  { echo "variant_bench.sh: no object of $target depends on the patched files" >&2; exit 1; }
link=""
for cmd in "${cmds[@]}"; do
  c="$cmd"
  for o in "${!objmap[@]}"; do c="${c//$o/${objmap[$o]}}"; done
  if [[ "$cmd" =~ \ qc\ ([^ ]+\.a)\  ]] && [ "$c" != "$cmd" ]; then  # an archive holding a new object
    lib="${BASH_REMATCH[1]}"
    libmap[$lib]="$work/$(basename "$lib")"
    c="${c//$lib/${libmap[$lib]}}"
    echo "+ $c" >>"$log"
    bash -c "$c" >>"$log" 2>&1 || { echo "variant_bench.sh: archiving $lib failed (see $log)" >&2; exit 1; }
  fi
  [[ "$cmd" == *" -o $target "* ]] && link="$c"
done
[ -n "$link" ] || { echo "variant_bench.sh: no link command of $target" >&2; exit 1; }
for l in "${!libmap[@]}"; do link="${link//$l/${libmap[$l]}}"; done
link="${link/ -o $target / -o $out/bench-$name }"
echo "+ $link" >>"$log"
bash -c "$link" >>"$log" 2>&1 || { echo "variant_bench.sh: linking failed (see $log)" >&2; exit 1; }
echo "$out/bench-$name ($(wc -l <"$work/objects.txt") object(s) compiled again: $(xargs -n1 basename <"$work/objects.txt" | tr '\n' ' '))"
