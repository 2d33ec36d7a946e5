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
