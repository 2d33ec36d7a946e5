#!/usr/bin/env bash
# The layout check must be able to fail: plant each kind of violation in a
# copy of the tree and expect scripts/check-includes.sh to name it.
set -euo pipefail
root=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
plant() {  # plant NAME FILE LINE EXPECTED_MESSAGE
  rm -rf "$work/tree" && mkdir -p "$work/tree" && cp -r "$root/include" "$root/src" "$work/tree/"
  echo "$3" >>"$work/tree/$2"
  if out=$(bash "$root/scripts/check-includes.sh" "$work/tree" 2>&1); then
    echo "FAIL: $1 went unnoticed"; exit 1
  fi
  grep -q "$4" <<<"$out" || { echo "FAIL: $1: expected \"$4\" in: $out"; exit 1; }
  echo "caught: $1"
}
plant "a lower module including a higher one" src/ledger/ledger.cpp \
  '#include "idemledger/queue/dlq.hpp"' "module ledger may use only"
plant "an adapter including the ledger" src/pg/pool.cpp \
  '#include "idemledger/ledger/ledger.hpp"' "module pg may use only"
plant "a public header including an internal one" include/idemledger/core/amount.hpp \
  '#include "src/core/internal/text.hpp"' "(public) includes internal"
plant "a public header including libpq" include/idemledger/pg/connection.hpp \
  '#include <libpq-fe.h>' "(public) includes <libpq-fe.h>"
plant "an include cycle" include/idemledger/core/result.hpp \
  '#include "idemledger/core/connection.hpp"' "include cycle"
