#!/usr/bin/env bash
# zeroshard-tokenize end to end: --help, bad flags (exit 2), bad input
# (exit 1, naming the file), and outputs checked token by token against the
# input's bytes by the independent reader llmc_files.py.
set -uo pipefail
R="${TEST_SRCDIR:-.}/zeroshard"
TOK="$R/worker/io/zeroshard-tokenize"
PY=/usr/bin/python3
CHECK="$R/worker/io/llmc_files.py"
T="${TEST_TMPDIR:-$(mktemp -d)}"
fails=0
check() {  # description, then the condition's exit status
  if [ "$2" -eq 0 ]; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}
expect() {  # description, expected exit code, expected substring, command...
  local what=$1 code=$2 text=$3; shift 3
  out=$("$@" 2>&1); rc=$?
  [ $rc -eq "$code" ] && grep -qF -- "$text" <<<"$out"
  check "$what (exit $rc: $out)" $?
}

expect "--help exits 0 with usage" 0 "Usage" "$TOK" --help
expect "--help documents --val_fraction" 0 "--val_fraction" "$TOK" --help
expect "unknown flag exits 2 naming it" 2 "no_such_flag" "$TOK" --no_such_flag=1
expect "missing --input exits 2" 2 "--input is required" "$TOK" --output="$T/x.bin"
expect "missing --output exits 2" 2 "--output is required" "$TOK" --input="$T/x"
expect "--val_fraction out of range exits 2" 2 "--val_fraction must be in [0, 1), got 1.5" \
  "$TOK" --input=a --output=b --val_fraction=1.5 --val_output=c
expect "--val_fraction without --val_output exits 2" 2 "needs --val_output" \
  "$TOK" --input=a --output=b --val_fraction=0.1
expect "--val_output without --val_fraction exits 2" 2 "needs --val_fraction" \
  "$TOK" --input=a --output=b --val_output=c
expect "non-numeric --val_fraction exits 2" 2 "val_fraction" \
  "$TOK" --input=a --output=b --val_fraction=abc
expect "missing input exits 1 naming it" 1 "$T/nope.txt: No such file or directory" \
  "$TOK" --input="$T/nope.txt" --output="$T/nope.bin"
: >"$T/empty.txt"
expect "empty input exits 1" 1 "$T/empty.txt: empty file" \
  "$TOK" --input="$T/empty.txt" --output="$T/empty.bin"
[ ! -e "$T/empty.bin" ]; check "no output for an empty input" $?

# Text with multi-byte UTF-8 and every byte value: tokens = bytes.
{ for i in $(seq 1 50); do echo "line $i: naïve café — ünïcödé"; done
  printf "$(printf '\\%03o' $(seq 0 255))"; } >"$T/in.txt"
n=$(stat -c %s "$T/in.txt")
expect "tokenizes a file with a summary" 0 "$n bytes of $T/in.txt -> $n tokens in $T/all.bin" \
  "$TOK" --input="$T/in.txt" --output="$T/all.bin"
expect "token file holds the bytes (independent reader)" 0 "OK, $n values" \
  $PY "$CHECK" check-tokens "$T/all.bin" "$T/in.txt" --from-bytes

# A 10% validation split from the end.
v=$(( (n + 5) / 10 ))
expect "val split summary" 0 "$((n - v)) tokens in $T/train.bin, $v tokens in $T/val.bin" \
  "$TOK" --input="$T/in.txt" --output="$T/train.bin" --val_fraction=0.1 --val_output="$T/val.bin"
head -c $((n - v)) "$T/in.txt" >"$T/head.txt"
tail -c $v "$T/in.txt" >"$T/tail.txt"
expect "train part is the head of the input" 0 "OK, $((n - v)) values" \
  $PY "$CHECK" check-tokens "$T/train.bin" "$T/head.txt" --from-bytes
expect "val part is the tail of the input" 0 "OK, $v values" \
  $PY "$CHECK" check-tokens "$T/val.bin" "$T/tail.txt" --from-bytes

# Too small to split: nothing is written.
printf "ab" >"$T/tiny.txt"
expect "a split that leaves a part empty exits 1" 1 "cannot be split" \
  "$TOK" --input="$T/tiny.txt" --output="$T/tiny.bin" --val_fraction=0.1 --val_output="$T/tinyv.bin"
[ ! -e "$T/tiny.bin" ] && [ ! -e "$T/tinyv.bin" ]; check "no output after a failed split" $?
expect "the fraction is printed as given, not rounded" 1 "--val_fraction=0.9999999 into" \
  "$TOK" --input="$T/tiny.txt" --output="$T/tiny.bin" --val_fraction=0.9999999 --val_output="$T/tinyv.bin"

# An output that is the input (any spelling, a hard link or a symlink) is
# refused before anything is written: the corpus is left as it was.
cp "$T/in.txt" "$T/corpus.txt"
ln "$T/corpus.txt" "$T/corpus.hard"
ln -s "$T/corpus.txt" "$T/corpus.soft"
same_as_input() {  # description, flags...
  local what=$1; shift
  cp "$T/in.txt" "$T/corpus.txt"  # in place: the links stay links to it
  expect "$what exits 2" 2 "would overwrite --input" "$TOK" --input="$T/corpus.txt" "$@"
  cmp -s "$T/in.txt" "$T/corpus.txt"; check "$what leaves the input intact" $?
}
same_as_input "--output = --input" --output="$T/corpus.txt"
same_as_input "--output = ./--input" --output="$T/./corpus.txt"
same_as_input "--output a hard link of --input" --output="$T/corpus.hard"
same_as_input "--output a symlink to --input" --output="$T/corpus.soft"
same_as_input "--val_output = --input" --output="$T/c.bin" --val_fraction=0.1 \
  --val_output="$T/corpus.txt"
[ ! -e "$T/c.bin" ]; check "no training part written when --val_output is the input" $?
(cd "$T" && expect "--val_output = --output spelled differently exits 2" 2 \
  "--val_output must differ from --output" "$TOK" --input=in.txt --output=o.bin \
  --val_fraction=0.1 --val_output=./o.bin)

# Output into a missing directory: exit 1, the path named, nothing left.
expect "unwritable output exits 1 naming it" 1 "$T/missing/dir/out.bin" \
  "$TOK" --input="$T/in.txt" --output="$T/missing/dir/out.bin"
leftovers=$(find "$T" -name '*.tmp.*' | wc -l)
[ "$leftovers" -eq 0 ]; check "no temporary files left ($leftovers)" $?

echo "$fails failed"
[ $fails -eq 0 ]
