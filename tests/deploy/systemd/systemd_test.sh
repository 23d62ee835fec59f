#!/usr/bin/env bash
# The systemd units of deploy/systemd/, checked offline (no systemd needs to run):
#   - `systemd-analyze verify` of ablated.service and ablate-worker@main.service in a scratch root
#     holding the distribution's units, stand-ins for the bundle's programs and the example
#     environment files: exit 0 and not one warning (verify exits 0 on unknown keys and bad values,
#     so any output fails the test; a deliberately broken copy checks that it is seen);
#   - `systemd-analyze security --offline`: exposure at most 2.0 (ablated) and 3.0 (worker);
#   - ablate.sysusers creates the user `ablate` (systemd-sysusers --root).
# Usage: systemd_test.sh SOURCE_DIR. Exit 77 (skip) without systemd-analyze or the distribution's
# unit folder.
set -euo pipefail
src="${1:?usage: systemd_test.sh SOURCE_DIR}"
units="$src/deploy/systemd"
command -v systemd-analyze >/dev/null || { echo "skip: no systemd-analyze"; exit 77; }
sys_units=""
for d in /usr/lib/systemd/system /lib/systemd/system; do
  [[ -f "$d/sysinit.target" ]] && { sys_units="$d"; break; }
done
[[ -n "$sys_units" ]] || { echo "skip: no systemd unit folder with sysinit.target"; exit 77; }

tmp="$(mktemp -d /tmp/ablate_systemd_test.XXXXXX)"
trap 'rm -rf -- "$tmp"' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# The scratch root: the distribution's units, /bin/sh for ExecStop, the programs the units start.
root="$tmp/root"
mkdir -p "$root/usr/lib/systemd" "$root/etc/systemd/system" "$root/etc/ablate" "$root/bin" \
  "$root/opt/ablate/bin"
cp -r "$sys_units" "$root/usr/lib/systemd/system"
cp "$(readlink -f /bin/sh)" "$root/bin/sh"
for p in ablated ablate-worker ablate-train ablate; do
  printf '#!/bin/sh\nexit 0\n' >"$root/opt/ablate/bin/$p"
  chmod 755 "$root/opt/ablate/bin/$p"
done
cp "$units/ablated.env.example" "$root/etc/ablate/ablated.env"
cp "$units/worker.env.example" "$root/etc/ablate/worker.env"
printf '%064d\n' 0 >"$root/etc/ablate/token"
chmod 600 "$root/etc/ablate/token"

verify() { # verify UNIT: prints systemd-analyze's output, returns its status
  systemd-analyze verify --man=no --root="$root" "$1" 2>&1
}

for u in ablated.service ablate-worker@.service; do
  [[ -f "$units/$u" ]] || fail "$units/$u is missing"
  cp "$units/$u" "$root/etc/systemd/system/$u"
done
for inst in ablated.service ablate-worker@main.service; do
  out="$(verify "$inst")" || fail "systemd-analyze verify $inst failed: $out"
  [[ -z "$out" ]] || fail "systemd-analyze verify $inst warned: $out"
  echo "verify $inst: ok"
done

# The check can fail: a unit with a misspelt key and a bad value must be reported.
sed -e 's/^KillMode=mixed/KillMode=mixd/' -e 's/^NoNewPrivileges=/NoNewPrivilege=/' \
  "$units/ablated.service" >"$root/etc/systemd/system/broken.service"
out="$(verify broken.service || true)"
[[ "$out" == *mixd* && "$out" == *NoNewPrivilege* ]] || fail "a broken unit went unnoticed: '$out'"
rm "$root/etc/systemd/system/broken.service"

# Settings the deployment relies on (README "systemd"): a regression here would still verify.
grep -q '^KillMode=mixed$' "$units/ablate-worker@.service" || fail "worker: KillMode must be mixed"
grep -q '^ExecStop=.*kill -TERM' "$units/ablate-worker@.service" || fail "worker: ExecStop must drain"
for u in ablated.service ablate-worker@.service; do
  for key in '^User=ablate$' '^ProtectSystem=strict$' '^NoNewPrivileges=yes$' '^PrivateTmp=yes$' \
    '^Restart=on-failure$' '^StateDirectory=' '^EnvironmentFile=' '^TimeoutStopSec='; do
    grep -q "$key" "$units/$u" || fail "$u: no line matching $key"
  done
done

# Exposure (0 = locked down, 10 = unprotected), in tenths for --threshold.
for pair in ablated.service:20 ablate-worker@main.service:30; do
  inst="${pair%%:*}" limit="${pair##*:}"
  report="$(systemd-analyze security --offline=true --root="$root" --threshold="$limit" "$inst" 2>&1)" ||
    fail "$inst: exposure above $((limit / 10)).$((limit % 10)): $(grep -i overall <<<"$report")"
  echo "$(grep -i 'overall exposure' <<<"$report")"
done

# The user.
if command -v systemd-sysusers >/dev/null; then
  mkdir -p "$tmp/users/etc"
  systemd-sysusers --root="$tmp/users" "$units/ablate.sysusers" >/dev/null 2>&1 ||
    fail "systemd-sysusers rejected ablate.sysusers"
  grep -q '^ablate:x:[0-9]*:[0-9]*:[^:]*:/var/lib/ablate:' "$tmp/users/etc/passwd" ||
    fail "ablate.sysusers made no user ablate: $(cat "$tmp/users/etc/passwd")"
  echo "sysusers: ok"
fi
echo "PASS"
