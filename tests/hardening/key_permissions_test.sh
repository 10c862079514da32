#!/usr/bin/env bash
# Issue 23 item 9 (keys and tokens): the real zeroshard-server refuses a
# TLS key or token file that its group or others may read (as ssh does):
# exit 2, one line naming the flag, the file and its mode, nothing
# listening; 0600 and 0400 start; --allow_insecure_key_permissions starts
# with a warning.
set -uo pipefail
R="${TEST_SRCDIR:-.}/${TEST_WORKSPACE:-zeroshard}"
SERVER="$R/server/zeroshard-server"
T="${TEST_TMPDIR:-$(mktemp -d)}"
C="$T/pki"
bash "$R/tests/hardening/section_a_certs.sh" "$C" >/dev/null || { echo "FAIL certificates"; exit 1; }
fails=0
check() {  # description, then the condition's exit status
  if [ "$2" -eq 0 ]; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}

# Starts a server with `key` and `tokens` at the given modes plus extra
# flags; sets rc (exit code, or "up" once it listened), err (its stderr).
start() {  # key mode, tokens mode, extra flags...
  local key_mode="$1" tok_mode="$2"; shift 2
  cp "$C/server.key" "$T/s.key"; cp "$C/tokens.txt" "$T/tokens"
  chmod "$key_mode" "$T/s.key"; chmod "$tok_mode" "$T/tokens"
  local port_file="$T/port"
  rm -f "$port_file"
  "$SERVER" --port=0 --port_file="$port_file" --tls_cert="$C/server.pem" \
    --tls_key="$T/s.key" --token_file="$T/tokens" "$@" >"$T/out" 2>"$T/err" &
  local pid=$!
  for _ in $(seq 600); do [ -s "$port_file" ] && break; kill -0 $pid 2>/dev/null || break; sleep 0.05; done
  if [ -s "$port_file" ]; then
    rc=up; kill -TERM $pid; wait $pid
  else
    wait $pid; rc=$?
  fi
  err=$(cat "$T/err")
}

refused() {  # flag, file, mode: the one stderr line names all three
  [ "$rc" = 2 ] && [ "$(wc -l <"$T/err")" -eq 1 ] && grep -q -- "$1" <<<"$err" &&
    grep -q -- "$2" <<<"$err" && grep -q -- "$3" <<<"$err" && grep -q "too open" <<<"$err"
}

start 0644 0600; refused --tls_key "$T/s.key" 0644; check "world-readable key refused (rc $rc: $err)" $?
start 0640 0600; refused --tls_key "$T/s.key" 0640; check "group-readable key refused (rc $rc: $err)" $?
start 0600 0644; refused --token_file "$T/tokens" 0644; check "world-readable token file refused (rc $rc: $err)" $?
start 0600 0604; refused --token_file "$T/tokens" 0604; check "others-readable token file refused (rc $rc: $err)" $?
start 0600 0600; [ "$rc" = up ]; check "0600 key and tokens start ($rc: $err)" $?
start 0400 0400; [ "$rc" = up ]; check "0400 key and tokens start ($rc: $err)" $?
start 0644 0644 --allow_insecure_key_permissions; [ "$rc" = up ] && grep -q "WARNING" <<<"$err"
check "--allow_insecure_key_permissions starts with a warning ($rc: $err)" $?

# --insecure with a token file: the token file is checked too.
cp "$C/tokens.txt" "$T/tokens"; chmod 0644 "$T/tokens"
out=$(timeout 30 "$SERVER" --port=0 --insecure --token_file="$T/tokens" 2>&1 </dev/null); rc=$?
[ $rc -eq 2 ] && grep -q "too open" <<<"$out"; check "--insecure --token_file checks the mode too (rc $rc)" $?

[ $fails -eq 0 ] && echo "key_permissions_test: PASS" || echo "key_permissions_test: $fails FAILED"
[ $fails -eq 0 ]
