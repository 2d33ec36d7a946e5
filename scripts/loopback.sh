# shellcheck shell=bash
# Sourced by the scripts that start the example services on loopback.
#
# logged_port LOG WHAT: the port a service logged in its
# '{"msg":"<WHAT>",...,"port":N}' line (either key order), waiting up to 10 s;
# fails, showing the log, if the line never comes.
logged_port() {
  local log=$1 what=$2 p=""
  for _ in $(seq 1 100); do
    p=$(sed -n "s/.*\"msg\":\"$what\".*\"port\":\([0-9]*\).*/\1/p; s/.*\"port\":\([0-9]*\).*\"msg\":\"$what\".*/\1/p" "$log" | head -n 1)
    [[ -n "$p" ]] && { echo "$p"; return; }
    sleep 0.1
  done
  echo "$log: no \"$what\" line:" >&2; cat "$log" >&2; exit 1
}

# loopback_http METHOD PORT PATH: one HTTP/1.0 request to 127.0.0.1:PORT with
# bash alone (no curl on a fresh machine); prints the response body.
loopback_http() {
  local fd
  exec {fd}<>"/dev/tcp/127.0.0.1/$2"
  printf '%s %s HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n' "$1" "$3" >&"$fd"
  sed '1,/^\r$/d' <&"$fd"
  exec {fd}<&-
}

# stop_cleanly NAME PID [NAME PID ...]: stops the services as an operator
# does, SIGTERM to all at once; each must exit 0 within 30 s. Sets
# stop_failures to one line per service that did not: "NAME: exit status N",
# or "NAME: still running 30 s after SIGTERM, SIGKILLed". Call it in the shell
# that started them (not in $(...)): only that shell can read their status.
stop_cleanly() {
  local -a names=() ids=()
  while (($# >= 2)); do names+=("$1") ids+=("$2"); shift 2; done
  stop_failures=()
  kill -TERM "${ids[@]}" 2>/dev/null || true
  local i status deadline=$(($(date +%s) + 30))
  for i in "${!ids[@]}"; do
    while kill -0 "${ids[$i]}" 2>/dev/null && (($(date +%s) < deadline)); do sleep 0.1; done
    if kill -KILL "${ids[$i]}" 2>/dev/null; then
      wait "${ids[$i]}" 2>/dev/null || true
      stop_failures+=("${names[$i]}: still running 30 s after SIGTERM, SIGKILLed")
      continue
    fi
    status=0
    wait "${ids[$i]}" 2>/dev/null || status=$?
    ((status == 0)) || stop_failures+=("${names[$i]}: exit status $status")
  done
}
