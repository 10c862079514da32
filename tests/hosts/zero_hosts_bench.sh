#!/usr/bin/env bash
# zero_hosts_bench: ZeRO on test hosts (tools/netlab.sh) against DDP, and
# overlap_comm on against off, on the 10g profile (10 Gbit/s per host link)
# and the slow 1g one. For each profile it runs zero_hosts_bench_run (its
# file comment has the setup: 2 servers on srv0/srv1, 2 nodes × 2 ranks on
# node0/node1, real processes, 9 variants at 2 bucket sizes alternated,
# medians; each stage's fastest setting counts) inside
# `netlab.sh run`, then prints the summary and, last, the 10g profile's
# figures:
#
#   bazel run -c opt //tests/hosts:zero_hosts_bench -- [--rounds=3] [--steps=12]
#       [--profiles=10g,1g] [zero_hosts_bench_run's flags]
#
# RESULT zero3_vs_ddp_hosts=<best stage 3 / best DDP, 10g>
#        zero2_vs_ddp_hosts=<best stage 2 / best DDP, 10g>
#        overlap_vs_no_overlap_worst=<max over stages and bucket sizes of
#            on / off, 10g>
#        zero3_offload_vs_ddp_hosts=... correct=<1: every run had DDP's losses>
#        zero3_vs_ddp_hosts_hi=... zero2_vs_ddp_hosts_hi=...
#            (the high ends of their 95 % bootstrap intervals over the runs)
#        overlap_slower_stages=<(stage, bucket size) pairs whose overlap
#            on / off interval lies wholly above 1: slower beyond the runs'
#            scatter>
#        zero2_delayed_vs_ddp_hosts=<stage 2 with the opt-in one-step
#            delayed update / best DDP, 10g; its losses are its own>
#        zero3_vs_ddp_hosts_1g=... zero2_vs_ddp_hosts_1g=...
#        overlap_vs_no_overlap_worst_1g=... zero3_offload_vs_ddp_hosts_1g=...
#            (nan when --profiles leaves 1g out)
#
# Where namespaces cannot be made (netlab.sh check exits 77) it prints
# "SKIP: <reason>" and `RESULT skipped=1`. Needs root (namespaces).
set -uo pipefail

here="${BASH_SOURCE[0]}"
runfiles="${RUNFILES_DIR:-$here.runfiles}/zeroshard"
[ -d "$runfiles" ] || runfiles="$(cd "$(dirname "$here")/../.." && pwd)"
find_bin() {  # runfiles first (bazel run), then the workspace's bazel-bin
  local rel="$1"
  for c in "$runfiles/$rel" "${BUILD_WORKSPACE_DIRECTORY:-.}/bazel-bin/$rel"; do
    [ -x "$c" ] && { echo "$c"; return 0; }
  done
  echo "zero_hosts_bench: $rel not found (build it first)" >&2
  exit 1
}
run_bin=$(find_bin tests/hosts/zero_hosts_bench_run)
worker=$(find_bin worker/train/zeroshard-worker)
server=$(find_bin server/zeroshard-server)
netlab="$runfiles/tools/netlab.sh"
[ -f "$netlab" ] || netlab="${BUILD_WORKSPACE_DIRECTORY:-.}/tools/netlab.sh"

profiles="10g 1g"
args=()
for a in "$@"; do
  case "$a" in
    --profiles=*) profiles=$(echo "${a#--profiles=}" | tr ',' ' ') ;;
    *) args+=("$a") ;;
  esac
done
for profile in $profiles; do
  case "$profile" in
    10g | 1g) ;;
    *) echo "zero_hosts_bench: --profiles: no profile '$profile' (10g, 1g)" >&2; exit 2 ;;
  esac
done
case " $profiles " in
  *" 10g "*) ;;
  *) echo "zero_hosts_bench: --profiles must include 10g (the RESULT line's)" >&2; exit 2 ;;
esac

reason=$(bash "$netlab" check 2>&1)
rc=$?
if [ "$rc" -ne 0 ]; then
  echo "SKIP: test hosts cannot be made here: ${reason#SKIP: }"
  echo "RESULT skipped=1"
  exit 0
fi

work=$(mktemp -d /tmp/zero_hosts_bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
declare -A summary
for profile in $profiles; do
  echo "=== profile $profile"
  out="$work/$profile.out"
  TEST_TMPDIR="$work" bash "$netlab" run --profile "$profile" \
    --hosts "srv0 srv1 node0 node1" -- \
    "$run_bin" --worker="$worker" --server="$server" --netlab="$netlab" \
    --dir="$work/$profile" --profile="$profile" ${args[@]+"${args[@]}"} 2>&1 | tee "$out"
  rc=${PIPESTATUS[0]}
  if [ "$rc" -eq 77 ]; then
    echo "SKIP: $(grep -m1 '^SKIP:' "$out" | cut -c7-)"
    echo "RESULT skipped=1"
    exit 0
  fi
  line=$(grep '^PROFILE ' "$out" | tail -1)
  if [ "$rc" -ne 0 ] || [ -z "$line" ]; then
    echo "zero_hosts_bench: profile $profile failed (exit $rc; logs kept in $work/$profile)" >&2
    trap - EXIT
    exit 1
  fi
  summary[$profile]="$line"
done

val() {  # val PROFILE KEY (nan for a profile not run)
  local v
  v=$(echo "${summary[$1]:-}" | tr ' ' '\n' | sed -n "s/^$2=//p")
  echo "${v:-nan}"
}
for profile in $profiles; do echo "${summary[$profile]}"; done
correct=1
for profile in $profiles; do
  [ "$(val "$profile" correct)" = 1 ] || correct=0
done
echo "RESULT zero3_vs_ddp_hosts=$(val 10g zero3_vs_ddp)" \
  "zero2_vs_ddp_hosts=$(val 10g zero2_vs_ddp)" \
  "overlap_vs_no_overlap_worst=$(val 10g overlap_vs_no_overlap_worst)" \
  "zero3_offload_vs_ddp_hosts=$(val 10g zero3_offload_vs_ddp)" \
  "correct=$correct" \
  "zero3_vs_ddp_hosts_hi=$(val 10g zero3_vs_ddp_hi)" \
  "zero2_vs_ddp_hosts_hi=$(val 10g zero2_vs_ddp_hi)" \
  "overlap_slower_stages=$(val 10g overlap_slower_stages)" \
  "zero2_delayed_vs_ddp_hosts=$(val 10g zero2_delayed_vs_ddp)" \
  "zero3_vs_ddp_hosts_1g=$(val 1g zero3_vs_ddp)" \
  "zero2_vs_ddp_hosts_1g=$(val 1g zero2_vs_ddp)" \
  "overlap_vs_no_overlap_worst_1g=$(val 1g overlap_vs_no_overlap_worst)" \
  "zero3_offload_vs_ddp_hosts_1g=$(val 1g zero3_offload_vs_ddp)"
