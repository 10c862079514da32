#!/usr/bin/env bash
# A network interface that appears and goes away while a one-machine job
# runs (what a container network's bridge does when container tests run
# beside it) must not touch the job: its ranks talk over loopback only
# (UcxTransportOptions::loopback_only). In a private network namespace: a
# veth pair up before the job starts, deleted mid-run; the 2-worker job
# must finish all its steps. Before the fix (and with UCX_NET_DEVICES=all
# in the environment) UCX carried the ranks' connection over the veth and
# the job hung when it was deleted (checked: FAIL after the bound).
# SKIPs (exit 0, saying why) where a network namespace or a veth cannot be
# made (not root, no veth module).
set -uo pipefail
R="${TEST_SRCDIR:-.}/zeroshard"
T="${TEST_TMPDIR:-$(mktemp -d)}"
skip() { echo "interface_churn_test: SKIPPED: $*"; exit 0; }
PATH="$PATH:/usr/sbin:/sbin"
command -v unshare >/dev/null || skip "no unshare"
command -v ip >/dev/null || skip "no ip (iproute2)"
# A mount namespace too, with its own /sys: UCX reads the interfaces'
# attributes there, and the root namespace's /sys would hide the veth.
NS=(unshare --net --mount)
"${NS[@]}" sh -c 'mount -t sysfs none /sys' 2>/dev/null ||
  skip "cannot make a network and mount namespace with its own /sys (not root?)"
"${NS[@]}" sh -c 'ip link add zs0 type veth peer name zs1' 2>/dev/null ||
  skip "cannot make a veth pair (no veth support)"

head -c 20000 "$R/README.md" >"$T/text.txt"
"$R/worker/io/zeroshard-tokenize" --input="$T/text.txt" --output="$T/tokens.bin" >/dev/null
cat >"$T/ds.json" <<'JSON'
{"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
 "zero_optimization": {"stage": 2}, "zeroshard": {"servers": 2}}
JSON
export R T
"${NS[@]}" bash -c '
  mount -t sysfs none /sys || exit 3
  ip link set lo up
  ip link add zs0 type veth peer name zs1 &&
    ip addr add 10.99.7.1/24 dev zs0 && ip link set zs0 up && ip link set zs1 up || exit 3
  "$R/launcher/zeroshard" train --config="$T/ds.json" --data="$T/tokens.bin" \
    --layers=1 --heads=2 --channels=32 --seq-len=16 --steps=2000 \
    --print_every=200 --work-dir="$T/job" >"$T/job.log" 2>&1 &
  job=$!
  for _ in $(seq 600); do grep -q "^step 400/" "$T/job.log" 2>/dev/null && break; sleep 0.05; done
  ip link del zs0
  echo "deleted the veth at: $(grep "^step " "$T/job.log" | tail -1)"
  # The job takes seconds; one still running after 200 s is hung.
  for _ in $(seq 2000); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
  if kill -0 $job 2>/dev/null; then
    echo "FAIL the job hung after the veth went away: $(grep "^step " "$T/job.log" | tail -1)"
    kill -TERM $job; wait $job; exit 1
  fi
  wait $job
'
rc=$?
grep -h "^step 2000/2000" "$T/job.log"
[ $rc -eq 0 ] && grep -q "^step 2000/2000" "$T/job.log" || {
  echo "FAIL rc $rc"; tail -5 "$T/job.log"; exit 1; }
echo "ok   the job finished all its steps with an interface gone mid-run"
