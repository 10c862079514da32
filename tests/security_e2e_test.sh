#!/usr/bin/env bash
# Issue 8 end to end: two zeroshard-server processes with mutual TLS and
# bearer tokens (a throw-away CA from make_test_certs.sh), a short ZeRO-3
# run of `zeroshard train` against them with the workers' credentials
# (token from a file), zeroshard-ctl with an admin token (from
# $ZEROSHARD_TOKEN) and a worker token (refused); then no token and no key
# material appears in any output of the run: servers, workers, launcher,
# ctl.
set -uo pipefail
R="${TEST_SRCDIR:-.}/zeroshard"
SERVER="$R/server/zeroshard-server"
CTL="$R/ctl/zeroshard-ctl"
LAUNCHER="$R/launcher/zeroshard"
TOKENIZE="$R/worker/io/zeroshard-tokenize"
T="${TEST_TMPDIR:-$(mktemp -d)}"
C="$T/pki"
fails=0
check() {  # description, then the condition's exit status
  if [ "$2" -eq 0 ]; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}
unset ZEROSHARD_TOKEN ZEROSHARD_TOKEN_FILE
bash "$R/tests/make_test_certs.sh" "$C" || { echo "FAIL certificates"; exit 1; }
TLS=(--tls_ca="$C/ca.pem" --tls_cert="$C/client.pem" --tls_key="$C/client.key")

# Servers: TLS flags are required; --insecure excludes them.
out=$("$SERVER" --tls_cert="$C/server.pem" --tls_key="$C/server.key" 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "give --token_file" <<<"$out"; check "TLS without --token_file exits 2 ($out)" $?
out=$("$SERVER" --insecure --tls_cert="$C/server.pem" 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "excludes" <<<"$out"; check "--insecure with --tls_cert exits 2" $?

pids=()
for k in 0 1; do
  rm -f "$T/port$k"
  "$SERVER" --shard_index=$k --num_shards=2 --port=0 --port_file="$T/port$k" \
    --tls_cert="$C/server.pem" --tls_key="$C/server.key" --tls_ca="$C/ca.pem" \
    --require_client_cert --token_file="$C/tokens.txt" --threads=1 \
    >"$T/server-$k.log" 2>&1 &
  pids+=($!)
done
for k in 0 1; do
  for _ in $(seq 200); do [ -s "$T/port$k" ] && break; sleep 0.05; done
done
ADDRS="localhost:$(cat "$T/port0"),localhost:$(cat "$T/port1")"

# Data and a ZeRO-3 config (as tests/launcher_test.sh).
head -c 20000 "$R/README.md" >"$T/text.txt"
"$TOKENIZE" --input="$T/text.txt" --output="$T/tokens.bin" >/dev/null
cat >"$T/ds.json" <<'JSON'
{
  "train_micro_batch_size_per_gpu": 2,
  "gradient_accumulation_steps": 1,
  "gradient_clipping": 1.0,
  "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.1}},
  "zero_optimization": {"stage": 3}
}
JSON
TRAIN=(train --config="$T/ds.json" --data="$T/tokens.bin" --layers=1 --heads=2
  --channels=32 --seq-len=16 --workers=2 --steps=4 --server_addrs="$ADDRS")

out=$("$LAUNCHER" "${TRAIN[@]}" --work_dir="$T/nocert" --tls_ca="$C/ca.pem" \
  --token_file="$C/zero-worker.token" 2>&1); rc=$?
[ $rc -ne 0 ]; check "a run without client certificates fails (rc $rc)" $?
grep -q "client certificate missing" <<<"$out"; check "its error says what a closed socket may mean ($out)" $?
out=$("$LAUNCHER" "${TRAIN[@]}" --work_dir="$T/run" "${TLS[@]}" \
  --token_file="$C/zero-worker.token" 2>&1); rc=$?
echo "$out" >"$T/launcher.log"
[ $rc -eq 0 ] && grep -q "step 4/4" <<<"$out"; check "ZeRO-3 run with mTLS and a worker token succeeds (rc $rc)" $?

out=$(ZEROSHARD_TOKEN="$(cat "$C/zero-admin.token")" "$CTL" stats --servers="$ADDRS" "${TLS[@]}" 2>&1); rc=$?
echo "$out" >"$T/ctl-admin.log"
[ $rc -eq 0 ] && grep -Eq "^0 +localhost:[0-9]+ +4 " <<<"$out"; check "ctl stats with the admin token shows step 4 ($out)" $?
out=$(ZEROSHARD_TOKEN="$(cat "$C/zero-worker.token")" "$CTL" stats --servers="$ADDRS" "${TLS[@]}" 2>&1); rc=$?
echo "$out" >"$T/ctl-worker.log"
[ $rc -eq 1 ] && grep -q "needs the admin role" <<<"$out"; check "ctl stats with a worker token is refused" $?
out=$(ZEROSHARD_TOKEN_FILE="$C/zero-admin.token" "$CTL" gather --servers="$ADDRS" "${TLS[@]}" \
  --offset=0 --length=16 --out="$T/g.bin" 2>&1); rc=$?
echo "$out" >"$T/ctl-gather.log"
[ $rc -eq 0 ] && grep -q "step 4" <<<"$out"; check "ctl gather with the admin token file works ($out)" $?
out=$(ZEROSHARD_TOKEN="$(cat "$C/zero-admin.token")" "$CTL" stats --servers="$ADDRS" 2>&1); rc=$?
echo "$out" >"$T/ctl-clear.log"
[ $rc -eq 2 ] && grep -q "refusing to send the bearer token in clear" <<<"$out"; check "ctl refuses to send a token in clear" $?

kill -TERM "${pids[@]}"
wait "${pids[@]}"
grep -q "audit: allowed who=zero-admin" "$T/server-0.log"; check "admin calls are audited" $?
grep -q "audit: refused who=zero-workers .*GetStats code=PERMISSION_DENIED" "$T/server-0.log"; check "refusals are audited" $?

# No secret in any output: tokens, private keys (any line of their base64).
logs=("$T"/server-*.log "$T"/run/*.log "$T"/nocert/*.log "$T"/launcher.log "$T"/ctl-*.log)
[ "${#logs[@]}" -ge 8 ]; check "collected ${#logs[@]} logs" $?
leaks=0
for secret in "$C"/*.token "$C"/*.key; do
  while read -r line; do
    case "$line" in ""|-----*) continue ;; esac
    if grep -qF -- "$line" "${logs[@]}"; then
      echo "secret of $(basename "$secret") found in: $(grep -lF -- "$line" "${logs[@]}")"
      leaks=$((leaks + 1))
    fi
  done <"$secret"
done
[ $leaks -eq 0 ]; check "no token or key material in any log ($leaks leaks)" $?

echo "$fails failed"
[ $fails -eq 0 ]
