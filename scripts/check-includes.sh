#!/usr/bin/env bash
# check-includes.sh [ROOT] — the module layout, enforced (ctest: layout.module_dependencies).
#
# Modules depend one way: core <- ledger <- {queue, relay, ops}; the adapters
# pg and eth depend on core only. A file in include/idemledger/<m>/ or
# src/<m>/ may include only headers of <m> and of the modules <m> builds on.
# Public headers never include src/ (internal) headers, libpq-fe.h or
# <unistd.h>, and no header includes itself through a cycle. Prints every
# violation; exits 1 if there is any.
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root"

declare -A allowed=(
  [core]="core"
  [ledger]="core ledger"
  [queue]="core ledger queue"
  [relay]="core ledger relay"
  [ops]="core ledger ops"
  [pg]="core pg"
  [eth]="core eth"
)
failures=0
fail() { echo "check-includes: $*" >&2; failures=$((failures + 1)); }

edges=$(mktemp)
trap 'rm -f "$edges"' EXIT
# One grep over every module's files, then plain bash on each "file:line":
# no process per line, so the check takes well under a second.
dirs=()
for module in "${!allowed[@]}"; do
  for d in "include/idemledger/$module" "src/$module"; do [[ -d $d ]] && dirs+=("$d"); done
done
include_re='^([^:]+):[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]([^">]+)[">]'
while IFS= read -r line; do
  [[ $line =~ $include_re ]] || continue
  file=${BASH_REMATCH[1]} target=${BASH_REMATCH[2]}
  if [[ $file == include/* ]]; then
    public=true module=${file#include/idemledger/}
  else
    public=false module=${file#src/}
  fi
  module=${module%%/*}
  case $target in
    idemledger/*/* | src/*/*)
      dep=${target#*/} && dep=${dep%%/*}
      [[ " ${allowed[$module]} " == *" $dep "* ]] \
        || fail "$file includes $target: module $module may use only ${allowed[$module]}"
      if $public && [[ $target == src/* || $target == */internal/* ]]; then
        fail "$file (public) includes internal $target"
      fi
      # Header-to-header edges, for the cycle check.
      if [[ $file == *.hpp ]]; then
        resolved=$target
        [[ $target == idemledger/* ]] && resolved="include/$target"
        echo "$resolved $file" >>"$edges"
      fi
      ;;
    libpq-fe.h | unistd.h | sys/types.h)
      if $public; then fail "$file (public) includes <$target>"; fi
      ;;
  esac
done < <(grep -rHE --include='*.hpp' --include='*.cpp' '^[[:space:]]*#[[:space:]]*include' "${dirs[@]}" | sort)
# The umbrella header sits outside the modules and may include all of them.
if [[ -s "$edges" ]] && ! tsort "$edges" >/dev/null 2>"$edges.err"; then
  fail "include cycle among headers: $(tr '\n' ' ' <"$edges.err")"
fi
rm -f "$edges.err"
if ((failures > 0)); then
  echo "check-includes: $failures violation(s)" >&2
  exit 1
fi
echo "check-includes: modules depend one way; no cycles; public headers clean"
