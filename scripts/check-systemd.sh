#!/usr/bin/env bash
# check-systemd.sh BUILD_DIR — the services' systemd units (deploy/systemd/)
# checked as a machine would load them: the build's `services` component is
# installed into a scratch root (prefix /usr) beside a copy of this machine's
# systemd unit tree, then each unit must pass `systemd-analyze verify` with
# no warning at all, and `systemd-analyze security --offline` must rate its
# exposure at most IDEMLEDGER_UNIT_EXPOSURE_MAX (default 2.5, "OK"); the
# scores are printed (docs/deploy.md records them).
set -euo pipefail
build=${1:?usage: check-systemd.sh BUILD_DIR}
max=${IDEMLEDGER_UNIT_EXPOSURE_MAX:-2.5}
here=$(cd "$(dirname "$0")/.." && pwd)
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/usr/lib" "$root/etc/idemledger"
cp -r /usr/lib/systemd "$root/usr/lib/"
DESTDIR="$root" cmake --install "$build" --prefix /usr --component services >/dev/null
# IDEMLEDGER_UNITS_FROM: check these unit files instead of the installed ones
# (tests/deploy/ plants faults in copies to prove this check can fail).
if [[ -n ${IDEMLEDGER_UNITS_FROM:-} ]]; then
  cp "$IDEMLEDGER_UNITS_FROM"/idemledger-*.service "$root/usr/lib/systemd/system/"
fi
for env in "$here"/deploy/systemd/*.env.example; do
  install -m 0600 "$env" "$root/etc/idemledger/$(basename "$env" .example)"
done
units=("$root"/usr/lib/systemd/system/idemledger-*.service)
((${#units[@]} == 3)) || { echo "check-systemd: expected 3 units, found ${#units[@]}" >&2; exit 1; }
status=0
for unit in "${units[@]}"; do
  name=$(basename "$unit")
  verdict=verifies
  # Documentation=man:… is looked up with man(1), among the installed pages.
  if ! out=$(MANPATH="$root/usr/share/man" systemd-analyze verify --root="$root" "$unit" 2>&1) ||
    [[ -n $out ]]; then
    echo "check-systemd: $name does not verify cleanly:" >&2
    echo "$out" >&2
    verdict="DOES NOT VERIFY"
    status=1
  fi
  score=$(systemd-analyze security --offline=yes --root="$root" "$unit" 2>&1 |
    sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
  [[ -n $score ]] || { echo "check-systemd: no exposure score for $name" >&2; status=1; continue; }
  echo "check-systemd: $name $verdict; exposure $score (at most $max)"
  awk -v s="$score" -v m="$max" 'BEGIN {exit !(s <= m)}' || { echo "check-systemd: $name is too exposed" >&2; status=1; }
done
exit $status
