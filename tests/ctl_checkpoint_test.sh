#!/usr/bin/env bash
# zeroshard-ctl checkpoint / restore / export / import against real servers
# (2 shards with --checkpoint_dir) after a short `zeroshard train` job:
# the checkpoint's files exist; the exported llm.c file, read by an
# independent reader (llmc_files.py), equals `ctl gather` bit for bit; an
# imported model gathers back bit for bit; restore brings the checkpoint's
# weights back and stats show the restored step; bad input exits with one
# line (2: command line, 1: the model or a server).
set -uo pipefail
R="${TEST_SRCDIR:-.}/zeroshard"
SERVER="$R/server/zeroshard-server"
CTL="$R/ctl/zeroshard-ctl"
LAUNCHER="$R/launcher/zeroshard"
TOKENIZE="$R/worker/io/zeroshard-tokenize"
LLMC="$R/worker/io/llmc_files.py"
PY=/usr/bin/python3
T="${TEST_TMPDIR:-$(mktemp -d)}"
fails=0
check() {  # description, then the condition's exit status
  if [ "$2" -eq 0 ]; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}
pids=()
cleanup() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done; wait; }
trap cleanup EXIT

# start NAME NUM_SHARDS SHARD_INDEX [server flags...]: address in $T/NAME.addr
start() {
  local name="$1" k="$2" i="$3"; shift 3
  "$SERVER" --num_shards="$k" --shard_index="$i" --port=0 --insecure \
    --port_file="$T/$name.port" "$@" >"$T/$name.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 200); do [ -s "$T/$name.port" ] && break; sleep 0.05; done
  echo "127.0.0.1:$(cat "$T/$name.port")"
}
# one_line DESCRIPTION WANT_RC WANT_TEXT then zeroshard-ctl's arguments
one_line() {
  local what="$1" want_rc="$2" want="$3"; shift 3
  out=$("$CTL" "$@" 2>&1); rc=$?
  [ $rc -eq "$want_rc" ] && [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] &&
    grep -q -- "$want" <<<"$out"
  check "$what: exit $want_rc, one line (rc $rc: $out)" $?
}

head -c 20000 "$R/README.md" >"$T/text.txt"
"$TOKENIZE" --input="$T/text.txt" --output="$T/tokens.bin" >/dev/null
cat >"$T/ds.json" <<'JSON'
{
  "train_micro_batch_size_per_gpu": 2,
  "gradient_accumulation_steps": 1,
  "optimizer": {"type": "AdamW", "params": {"lr": 3e-3}},
  "zero_optimization": {"stage": 3}
}
JSON
train() {  # servers, steps
  "$LAUNCHER" train --config="$T/ds.json" --data="$T/tokens.bin" \
    --layers=1 --heads=2 --channels=32 --seq-len=16 --workers=1 --insecure \
    --server-addrs="$1" --steps="$2" --work-dir="$T/run-$2" >"$T/train-$2.log" 2>&1
}

S="$(start a0 2 0 --checkpoint_dir="$T/ckpt"),$(start a1 2 1 --checkpoint_dir="$T/ckpt")"
train "$S" 3; check "a 3-step job on 2 servers with --checkpoint_dir" $?

# checkpoint
out=$("$CTL" checkpoint --servers="$S" --tag=first 2>&1); rc=$?
echo "    | $out"
[ $rc -eq 0 ] && grep -q "^checkpoint of step 3 (tag first): shard 0 $T/ckpt/step-0000000003/shard-00000-of-00002.ckpt crc32c [0-9a-f]\{8\}, shard 1 .*shard-00001-of-00002.ckpt crc32c [0-9a-f]\{8\}$" <<<"$out"
check "checkpoint prints step, files and CRCs" $?
[ -s "$T/ckpt/step-0000000003/MANIFEST" ] &&
  [ -s "$T/ckpt/step-0000000003/shard-00000-of-00002.ckpt" ] &&
  [ -s "$T/ckpt/step-0000000003/shard-00001-of-00002.ckpt" ]
check "step directory holds MANIFEST and both shard files" $?

# export = gather, read by the independent reader
N=$("$CTL" plan --servers="$S" | head -1 | sed -n 's/^job [^:]*: \([0-9]*\) elements.*/\1/p')
"$CTL" gather --servers="$S" --offset=0 --length="$N" --out="$T/step3.raw" >/dev/null
check "gather the whole model ($N elements)" $?
out=$("$CTL" export --servers="$S" --heads=2 --out="$T/export.bin" 2>&1); rc=$?
echo "    | $out"
[ $rc -eq 0 ] && grep -q "^exported step 3 .*(maxT=16 V=256 Vp=256 L=1 NH=2 C=32, $N parameters)" <<<"$out"
check "export prints the step and the derived config" $?
$PY "$LLMC" check-model "$T/export.bin" "$T/step3.raw" --config 16,256,256,1,2,32
check "exported file = gathered model, bit for bit (llmc_files.py)" $?
ls "$T" | grep -q "export.bin." ; [ $? -ne 0 ]; check "no temporary file left beside the export" $?
one_line "export without --heads" 2 "export needs --heads" export --servers="$S" --out="$T/x.bin"
one_line "export with heads not dividing C" 1 "--heads 5 does not divide the model's 32 channels" \
  export --servers="$S" --heads=5 --out="$T/x.bin"
[ ! -e "$T/x.bin" ]; check "a failed export writes nothing" $?

# import a different model of the same shape, gather it back
$PY "$LLMC" write-model "$T/new.bin" "$T/new.raw" --config 16,256,256,1,2,32 --seed 7 >/dev/null
out=$("$CTL" import --servers="$S" --model="$T/new.bin" 2>&1); rc=$?
echo "    | $out"
[ $rc -eq 0 ] && grep -q "^imported $N parameters" <<<"$out"; check "import succeeds" $?
"$CTL" gather --servers="$S" --offset=0 --length="$N" --out="$T/imported.raw" >/dev/null &&
  cmp -s "$T/imported.raw" "$T/new.raw"
check "gathered after import = the file's parameters, bit for bit" $?
$PY "$LLMC" write-model "$T/wide.bin" "$T/wide.raw" --config 16,256,256,1,2,64 --seed 7 >/dev/null
one_line "import of a wider model" 1 "does not fit the registered model: tensor 0: registered 'wte' 256x32, file 'wte' 256x64" \
  import --servers="$S" --model="$T/wide.bin"
$PY "$LLMC" write-model "$T/deep.bin" "$T/deep.raw" --config 16,256,256,2,2,32 --seed 7 >/dev/null
one_line "import of a deeper model" 1 "tensor 14: registered 'lnfw' 32, file 'h.1.ln1w' 32" \
  import --servers="$S" --model="$T/deep.bin"
one_line "import without --model" 2 "import needs --model" import --servers="$S"
# (a bad --model is a bad command line: checked before any server, exit 2)
one_line "import of a missing file" 2 "--model: open $T/none.bin" import --servers="$S" --model="$T/none.bin"

# restore: the checkpoint's weights come back, at a new epoch
one_line "checkpoint with a newline in its tag" 1 'tag "a\\nb../x" has a control character' \
  checkpoint --servers="$S" --tag=$'a\nb../x'
one_line "restore of a step never checkpointed" 1 "no complete checkpoint of step 2" \
  restore --servers="$S" --step=2
out=$("$CTL" restore --servers="$S" 2>&1); rc=$?
echo "    | $out"
[ $rc -eq 0 ] && grep -q "^restored step 3 at epoch 1; trainer state: step 3" <<<"$out"
check "restore picks the newest common checkpoint (step 3)" $?
grep -q "; recorded by a run of 1 worker (micro batch [0-9]*, sequence length 16, gradient accumulation 1, lr 0.003, data $T/tokens.bin)$" <<<"$out"
check "and says what run recorded its state" $?
"$CTL" gather --servers="$S" --offset=0 --length="$N" --out="$T/restored.raw" >/dev/null &&
  cmp -s "$T/restored.raw" "$T/step3.raw"
check "gathered after restore = gathered at the checkpoint, bit for bit" $?
out=$("$CTL" stats --servers="$S" 2>&1)
grep -q "^shard 0 checkpoints: steps 3; restored step 3; 1 written" <<<"$out" &&
  grep -q "^shard 1 checkpoints: steps 3; restored step 3; 1 written" <<<"$out" &&
  [ "$(awk '$1 ~ /^[01]$/ {print $3, $4}' <<<"$out" | sort -u)" = "3 1" ]
check "stats show step 3, epoch 1 and the restored step ($out)" $?

# --keep_checkpoints=2: the newest two complete checkpoints stay (both
# servers share the directory, as here, or each has its own).
K="$(start k0 2 0 --checkpoint_dir="$T/kckpt" --keep_checkpoints=2),$(start k1 2 1 --checkpoint_dir="$T/kckpt" --keep_checkpoints=2)"
"$LAUNCHER" train --config="$T/ds.json" --data="$T/tokens.bin" \
  --layers=1 --heads=2 --channels=32 --seq-len=16 --workers=1 --insecure \
  --server-addrs="$K" --steps=4 --checkpoint-interval=1 --work-dir="$T/run-keep" >"$T/train-keep.log" 2>&1
check "a 4-step job checkpointing every step on servers keeping 2" $?
kept=$(ls "$T/kckpt" | grep -v '^LOCK\.shard-' | tr '\n' ' ')
[ "$kept" = "step-0000000003 step-0000000004 " ]; check "only the newest 2 checkpoints stay ($kept)" $?
# A second job's server of shard 1 on the same directory is refused (after
# waiting 10 s for a holder that might be exiting); the first one goes on.
start=$(date +%s)
out=$("$SERVER" --num_shards=2 --shard_index=1 --port=0 --insecure \
  --checkpoint_dir="$T/kckpt" 2>&1); rc=$?
echo "    | $out"
[ $rc -eq 1 ] && grep -q "LOCK.shard-00001.*held by pid [0-9]*).*another zeroshard-server of shard 1 uses this --checkpoint_dir" <<<"$out" &&
  [ $(($(date +%s) - start)) -ge 9 ] && "$CTL" health --servers="$K" >/dev/null
check "a second server of shard 1 on that --checkpoint_dir is refused, naming the holder" $?
# (They share the directory: whichever got to a checkpoint first says so.)
cat "$T/k0.log" "$T/k1.log" | grep -q "removed checkpoint $T/kckpt/step-0000000002 (--keep_checkpoints=2)"
check "a server says what it removed" $?
out=$("$CTL" restore --servers="$K" 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "^restored step 4 " <<<"$out"; check "the newest kept checkpoint restores ($out)" $?
# A damaged file of step 3 on shard 1: shard 0 restores, shard 1 cannot,
# and the error says where each server is now; step 4 then restores both.
printf '\xff' | dd of="$T/kckpt/step-0000000003/shard-00001-of-00002.ckpt" bs=1 seek=300 conv=notrunc 2>/dev/null
out=$("$CTL" restore --servers="$K" --step=3 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "shard-00001-of-00002.ckpt.*checksum mismatch.*; the servers are now at: shard 0: step 3 (restored), shard 1: step 4\. Restore another step" <<<"$out"
check "a restore that one server cannot do says where each one is ($out)" $?
out=$("$CTL" restore --servers="$K" --step=4 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "^restored step 4 " <<<"$out"; check "then step 4 restores on both ($out)" $?
# list: the directory read from disk, no servers. Step 3's MANIFEST is
# sound (list shows it complete); --verify reads the files and finds the
# damaged one; a step directory without a MANIFEST is incomplete.
mkdir -p "$T/kckpt/step-0000000009"
cp "$T/kckpt/step-0000000004/shard-00000-of-00002.ckpt" "$T/kckpt/step-0000000009/"
out=$("$CTL" list --checkpoint_dir="$T/kckpt" 2>&1); rc=$?
echo "$out" | sed 's/^/    | /'
[ $rc -eq 0 ] && grep -q "^  step 4  complete  job 'zero', 2 of 2 shards, [0-9]* bytes; step 4, updates 4, .*; recorded by a run of 1 worker (micro batch 2, " <<<"$out" &&
  grep -q "^  step 3  complete  " <<<"$out" &&
  grep -q "^  step 9  incomplete (no MANIFEST" <<<"$out" &&
  grep -q "^newest complete checkpoint: step 4 " <<<"$out"
check "list: steps 4 and 3 complete, 9 incomplete, 4 the newest (rc $rc)" $?
out=$("$CTL" list --checkpoint_dir="$T/kckpt" --verify 2>&1); rc=$?
echo "$out" | sed 's/^/    | /'
[ $rc -eq 1 ] && grep -q "^  step 4  complete  " <<<"$out" &&
  grep -q "^  step 3  DAMAGED  " <<<"$out" &&
  grep -q "^    DATA_LOSS: .*shard-00001-of-00002.ckpt.*checksum mismatch" <<<"$out" &&
  grep -q "^newest complete checkpoint that checks out: step 4 " <<<"$out"
check "list --verify: step 3's damaged file found, exit 1 (rc $rc)" $?
one_line "list without --checkpoint_dir" 2 "list needs --checkpoint_dir" list
# Step 0 is a checkpoint like the others: a job shorter than its interval
# has only it, and --step=0 or the newest restores it.
Z="$(start z0 2 0 --checkpoint_dir="$T/zckpt"),$(start z1 2 1 --checkpoint_dir="$T/zckpt")"
"$LAUNCHER" train --config="$T/ds.json" --data="$T/tokens.bin" \
  --layers=1 --heads=2 --channels=32 --seq-len=16 --workers=1 --insecure \
  --server-addrs="$Z" --steps=2 --checkpoint-interval=100 --work-dir="$T/run-z" >"$T/train-z.log" 2>&1
check "a 2-step job checkpointing every 100 steps (only step 0)" $?
out=$("$CTL" restore --servers="$Z" --step=0 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "^restored step 0 at epoch 1; trainer state: step 0" <<<"$out"
check "restore --step=0 restores checkpoint 0 ($out)" $?
out=$("$CTL" restore --servers="$Z" 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "^restored step 0 at epoch 2" <<<"$out"
check "restore of the newest finds checkpoint 0 ($out)" $?
one_line "restore --step=-2" 2 "--step must be >= 0 (or -1: the newest complete)" restore --servers="$Z" --step=-2
out=$("$SERVER" --keep_checkpoints=-1 --insecure 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q -- "--keep_checkpoints -1 is not in \[0, 1000000\]" <<<"$out"
check "a negative --keep_checkpoints exits 2 ($out)" $?

# A server without --checkpoint_dir.
B=$(start b 1 0)
train "$B" 1; check "a 1-step job on a server without --checkpoint_dir" $?
one_line "checkpoint on a server without --checkpoint_dir" 1 "without --checkpoint_dir" \
  checkpoint --servers="$B"
one_line "restore on a server without --checkpoint_dir" 1 "no checkpoint is complete on every server (shard 0: none" \
  restore --servers="$B"
one_line "export with a bad --vocab" 1 "--vocab 300 is not in \[0, the model's 256 embedding rows\]" \
  export --servers="$B" --heads=2 --vocab=300 --out="$T/x.bin"

echo "$fails failed"
[ $fails -eq 0 ]
