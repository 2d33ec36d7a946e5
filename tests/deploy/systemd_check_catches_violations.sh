#!/usr/bin/env bash
# The systemd unit check must be able to fail: plant each kind of fault in a
# copy of the units and expect scripts/check-systemd.sh to name it.
set -euo pipefail
root=$1 build=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
plant() {  # plant NAME UNIT SED_EXPRESSION EXPECTED_MESSAGE
  rm -rf "$work/units" && mkdir -p "$work/units" && cp "$root"/deploy/systemd/*.service "$work/units/"
  sed -i "$3" "$work/units/$2"
  if out=$(IDEMLEDGER_UNITS_FROM="$work/units" bash "$root/scripts/check-systemd.sh" "$build" 2>&1); then
    echo "FAIL: $1 went unnoticed"; exit 1
  fi
  grep -q "$4" <<<"$out" || { echo "FAIL: $1: expected \"$4\" in: $out"; exit 1; }
  echo "caught: $1"
}
plant "a misspelt setting" idemledger-webhook-intake.service \
  's/^NoNewPrivileges=yes/NoNewPrivilege=yes/' "does not verify cleanly"
plant "a command that is not installed" idemledger-outbox-worker.service \
  's|^ExecStart=.*|ExecStart=/usr/bin/idemledger-no-such-binary|' "is not executable"
plant "the sandbox taken off" idemledger-notification-relay.service \
  '/^\(DynamicUser\|ProtectSystem\|PrivateUsers\|SystemCallFilter\|CapabilityBoundingSet\)=/d' "is too exposed"
