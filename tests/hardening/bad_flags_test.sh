#!/usr/bin/env bash
# Issue 23 item 12: every bad flag of the real zeroshard-server is refused
# at start with exit 2 and exactly one line on stderr naming the flag (no
# gRPC log lines, no misleading "address in use"), nothing on stdout, and
# nothing listens: the --port_file is never written.
#
# Table: one row per case, "flag-to-name | arguments...". TLS rows use a
# throw-away PKI from section_a_certs.sh.
set -uo pipefail
R="${TEST_SRCDIR:-.}/${TEST_WORKSPACE:-zeroshard}"
SERVER="$R/server/zeroshard-server"
T="${TEST_TMPDIR:-$(mktemp -d)}"
C="$T/pki"
bash "$R/tests/hardening/section_a_certs.sh" "$C" >/dev/null || { echo "FAIL certificates"; exit 1; }
# A truncated key, a key of another certificate, a PEM that is no
# certificate, and a directory and a plain file.
head -c 100 "$C/server.key" >"$C/truncated.key"
cp "$C/client.key" "$C/other.key"
cp "$C/server.pem" "$C/cert-as.key"
printf -- '-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n' >"$C/junk.pem"
chmod 600 "$C"/*.key
touch "$T/plain-file"
TLS=(--tls_cert="$C/server.pem" --tls_ca="$C/ca.pem" --token_file="$C/tokens.txt")

fails=0
run_case() {  # flag, then the server's arguments
  local flag="$1"; shift
  local port_file="$T/port.$RANDOM$RANDOM"
  rm -f "$port_file"
  # A server that accepts the flag would listen forever: 30 s at most.
  timeout -s KILL 30 "$SERVER" --port=0 --port_file="$port_file" "$@" >"$T/out" 2>"$T/err"
  local rc=$? lines
  # (A value that does not parse also gets common/flags.cc's "Try
  # '<program> --help'." hint, which is not counted.)
  lines=$(grep -vc "^Try '.* --help'.$" "$T/err")
  if [ $rc -eq 2 ] && [ "$lines" -eq 1 ] && grep -q -- "$flag" "$T/err" &&
     [ ! -s "$T/out" ] && [ ! -e "$port_file" ]; then
    echo "ok   $flag: $(cat "$T/err")"
  else
    echo "FAIL $flag (${*##*/}): exit $rc, $lines stderr lines, port file $([ -e "$port_file" ] && echo written || echo absent)"
    sed 's/^/       stderr: /' "$T/err"
    sed 's/^/       stdout: /' "$T/out" | head -5
    fails=$((fails + 1))
  fi
}

# TLS material: checked before gRPC starts.
run_case --tls_key "${TLS[@]}" --tls_key="$C/truncated.key"
run_case --tls_key "${TLS[@]}" --tls_key="$C/other.key"
run_case --tls_key "${TLS[@]}" --tls_key="$C/cert-as.key"
run_case --tls_cert --tls_cert="$C/junk.pem" --tls_key="$C/server.key" --tls_ca="$C/ca.pem" --token_file="$C/tokens.txt"
run_case --tls_ca --tls_cert="$C/server.pem" --tls_key="$C/server.key" --tls_ca="$C/junk.pem" --token_file="$C/tokens.txt"
# Directories and files.
run_case --checkpoint_dir --insecure --checkpoint_dir=/etc/passwd
run_case --checkpoint_dir --insecure --checkpoint_dir="$T/plain-file/sub"
run_case --checkpoint_dir --insecure --checkpoint_dir=/proc/zeroshard-ckpt  # cannot be created
run_case --checkpoint_dir --insecure --checkpoint_dir=/proc  # cannot be written
run_case --nvme_path --insecure --storage=nvme --nvme_path=/etc/passwd
run_case --port_file --insecure --port_file="$T/no/such/dir/port"
# Values that do not parse, unknown flags.
run_case --port --insecure --port=abc
run_case --no_such_flag --insecure --no_such_flag=1
# Numbers out of range.
run_case --max_state_bytes --insecure --max_state_bytes=-7
run_case --grace_seconds --insecure --grace_seconds=-1
run_case --grace_seconds --insecure --grace_seconds=nan
run_case --grace_seconds --insecure --grace_seconds=inf
run_case --max_inflight_bytes --insecure --max_inflight_bytes=-5
run_case --max_streams_per_connection --insecure --max_streams_per_connection=0
run_case --port --insecure --port=70000
run_case --metrics_port --insecure --metrics_port=-2
run_case --threads --insecure --threads=0
run_case --grpc_threads --insecure --grpc_threads=-1
run_case --lease_ms --insecure --lease_ms=-1
run_case --num_shards --insecure --num_shards=0
run_case --aio_block_size --insecure --aio_block_size=-4096
run_case --read_cache_bytes --insecure --read_cache_bytes=-1
run_case --buffer_count --insecure --buffer_count=0
run_case --sub_group_size --insecure --sub_group_size=-1

# The good configuration starts (so the failures above are the flags').
port_file="$T/port.good"
"$SERVER" --port=0 --port_file="$port_file" --tls_key="$C/server.key" "${TLS[@]}" \
  --checkpoint_dir="$T/ckpt" >"$T/good.log" 2>&1 &
pid=$!
for _ in $(seq 600); do [ -s "$port_file" ] && break; kill -0 $pid 2>/dev/null || break; sleep 0.05; done
if [ -s "$port_file" ]; then echo "ok   the good configuration starts"; else
  echo "FAIL the good configuration does not start"; cat "$T/good.log"; fails=$((fails + 1)); fi
kill -TERM $pid 2>/dev/null; wait $pid

[ $fails -eq 0 ] && echo "bad_flags_test: PASS" || echo "bad_flags_test: $fails FAILED"
[ $fails -eq 0 ]
