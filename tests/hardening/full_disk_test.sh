#!/usr/bin/env bash
# A checkpoint directory that fills up during a run (`zeroshard train`, 2
# servers, 2 workers, ZeRO-3, a checkpoint every 2 steps, on a 1 MiB tmpfs
# that holds about three): the checkpoint that does not fit fails with
# RESOURCE_EXHAUSTED naming the file and "No space left on device"; the job
# stops at once (the workers' error would come again: no restarts) and
# says the same command continues it; the failed attempt leaves no
# temporary file and no MANIFEST; the checkpoints before it are complete.
# With room again (the tmpfs grown), the same command continues from the
# newest of them (or from the servers' shutdown snapshots, where they fit)
# and saves the bits of an uninterrupted run.
#
# The tmpfs is mounted in a private mount namespace (unshare -m), so it
# goes with the test whatever happens; where one cannot be made (not root,
# no unshare, mounts forbidden) the test prints "SKIP: <reason>" and passes.
set -uo pipefail
R="${TEST_SRCDIR:-.}/zeroshard"
LAUNCHER="$R/launcher/zeroshard"
TOKENIZE="$R/worker/io/zeroshard-tokenize"
T="${TEST_TMPDIR:-$(mktemp -d)}"

if [ "${ZS_FULL_DISK_INNER:-}" != 1 ]; then
  mkdir -p "$T/probe"
  if ! why=$(unshare -m sh -c "mount -t tmpfs -o size=64k zs-probe '$T/probe'" 2>&1); then
    echo "SKIP: cannot mount a tmpfs in a private mount namespace here: $why"
    exit 0
  fi
  # Everything else runs inside the namespace.
  ZS_FULL_DISK_INNER=1 exec unshare -m bash "$0" "$@"
fi

fails=0
check() {  # description, then the condition's exit status
  if [ "$2" -eq 0 ]; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}

head -c 20000 "$R/README.md" >"$T/text.txt"
"$TOKENIZE" --input="$T/text.txt" --output="$T/tokens.bin" >/dev/null
cat >"$T/ds.json" <<'JSON'
{
  "train_micro_batch_size_per_gpu": 2,
  "gradient_accumulation_steps": 1,
  "gradient_clipping": 1.0,
  "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.1}},
  "zero_optimization": {"stage": 3},
  "zeroshard": {"servers": 2}
}
JSON
JOB=(train --config="$T/ds.json" --data="$T/tokens.bin" --layers=1 --heads=2
  --channels=32 --seq-len=16 --steps=20 --print_every=1)

# The reference: the same job, uninterrupted, without checkpoints.
"$LAUNCHER" "${JOB[@]}" --save="$T/ref.bin" --work-dir="$T/ref" >"$T/ref.log" 2>&1
check "the uninterrupted run exits 0" $?

# Each checkpoint of this model takes about 260 KiB (two shard files).
C="$T/ckpt"
mkdir -p "$C"
mount -t tmpfs -o size=1m,mode=0700 zs-full-disk "$C"
check "a 1 MiB tmpfs for the checkpoints" $?
"$LAUNCHER" "${JOB[@]}" --checkpoint-dir="$C" --checkpoint-interval=2 \
  --save="$T/full.bin" --work-dir="$T/full" >"$T/full.log" 2>&1
rc=$?
[ $rc -ne 0 ]; check "the run whose checkpoint does not fit fails (exit $rc)" $?
grep -q "RESOURCE_EXHAUSTED: Checkpoint on shard [01] .*\.ckpt.*: No space left on device" "$T/full.log"
check "the error names the checkpoint file and the full disk" $?
grep -q "the error would come again (not restarting the workers)" "$T/full.log"
check "the job stops at once, without restarts" $?
! ls "$T/full"/rank-*.attempt-* >/dev/null 2>&1
check "no worker was started again" $?
grep -q "the same command again continues the job" "$T/full.log"
check "it says that the same command continues the job" $?
[ ! -e "$T/full.bin" ]; check "no model saved from the failed run" $?

complete=()
incomplete=()
for d in "$C"/step-*; do
  if [ -f "$d/MANIFEST" ]; then complete+=("$(basename "$d")"); else incomplete+=("$(basename "$d")"); fi
done
newest=${complete[${#complete[@]}-1]:-none}
[ ${#complete[@]} -ge 2 ] && [ ${#incomplete[@]} -eq 1 ] &&
  [[ "${incomplete[0]}" > "$newest" ]]
check "checkpoints ${complete[*]} complete, ${incomplete[*]:-none} (after them) without a MANIFEST" $?
! ls "$C"/step-*/*.tmp-* >/dev/null 2>&1
check "the failed attempt left no temporary file" $?
for d in "${complete[@]}"; do
  n=$(ls "$C/$d"/shard-*-of-00002.ckpt 2>/dev/null | wc -l)
  [ "$n" -eq 2 ]; check "$d holds both shard files" $?
done

# Room again: the same command continues from the newest complete checkpoint.
mount -o remount,size=64m "$C"
check "the tmpfs grown to 64 MiB" $?
out=$("$LAUNCHER" "${JOB[@]}" --checkpoint-dir="$C" --checkpoint-interval=2 \
  --save="$T/resumed.bin" --work-dir="$T/resumed" 2>&1)
check "the same command, with room, exits 0" $?
# From the newest complete checkpoint, or from the servers' shutdown
# snapshots of the step that did not fit, where the failed checkpoint's
# files were removed and left room for both (which one fails first depends
# on how the two servers' writes interleave).
from=$newest
ls "$C/${incomplete[0]}"/SNAPSHOT-* >/dev/null 2>&1 && from=${incomplete[0]}
step=$((10#${from#step-}))
grep -q "continuing the job at step $((step + 1)) of 20" <<<"$out"
check "it continues after step $step ($from)" $?
cmp -s "$T/ref.bin" "$T/resumed.bin"
check "the continued run saves the uninterrupted run's bits" $?
[ -f "$C/step-0000000020/MANIFEST" ]
check "with room, the checkpoints complete again (step 20's)" $?

umount "$C" 2>/dev/null
if [ "$fails" -ne 0 ]; then
  echo "--- the run on the full disk:"; tail -n 30 "$T/full.log"
  echo "--- the continued run:"; printf '%s\n' "$out" | tail -n 30
  exit 1
fi
echo "PASS"
