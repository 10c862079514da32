#!/usr/bin/env bash
# collect_rootfs.sh OUT BINARY...
# Builds a minimal root file system in OUT for a FROM scratch image: the
# binaries in /usr/local/bin, every shared library `ldd` resolves for them
# (copied to the path the loader looks in, symlinks followed), the dynamic
# loader, UCX's transport modules (loaded with dlopen, invisible to ldd),
# /etc/passwd and /etc/group with the user zeroshard (65532), an
# nsswitch.conf that reads /etc/hosts before DNS, and /tmp. No shell.
# Libraries that ldd cannot find make it fail, naming them. Used by the
# Containerfiles' build stage and by build_offline.sh.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 OUT BINARY..." >&2; exit 2; }
out=$1; shift
mkdir -p "$out/usr/local/bin" "$out/usr/lib" "$out/usr/lib64" "$out/etc" "$out/tmp"
chmod 1777 "$out/tmp"
# Merged /usr as on bookworm: ldd names /lib/... and /lib64/..., and UCX
# finds its modules next to the path it was loaded from.
for d in lib lib64; do [ -e "$out/$d" ] || ln -s "usr/$d" "$out/$d"; done

copy_lib() {  # a path a binary's loader will open
  [ -e "$out$1" ] && return 0
  mkdir -p "$out$(dirname "$1")"
  cp -L "$1" "$out$1"
}
closure() {  # every library one ELF file needs
  local f=$1 line
  if ! ldd "$f" >/dev/null 2>&1; then return 0; fi  # static or not ELF
  if ldd "$f" | grep -q "not found"; then
    echo "collect_rootfs: $f: $(ldd "$f" | grep 'not found' | tr -s ' \t' ' ')" >&2
    exit 1
  fi
  while read -r line; do
    case "$line" in
      *"=> /"*) copy_lib "$(sed 's/.*=> \([^ ]*\).*/\1/' <<<"$line")" ;;
      /*) copy_lib "${line%% *}" ;;  # the loader
    esac
  done < <(ldd "$f")
}

for b in "$@"; do
  cp -L "$b" "$out/usr/local/bin/$(basename "$b")"
  closure "$b"
done
# UCX opens its transports (libuct_*.so) from its module directory.
for ucx in "$out"/usr/lib/*/libucp.so.*; do
  [ -e "$ucx" ] || continue
  moddir="$(dirname "${ucx#"$out"}")/ucx"
  if [ -d "$moddir" ]; then
    mkdir -p "$out$moddir"
    for m in "$moddir"/*.so*; do
      copy_lib "$m"
      closure "$m" || true
    done
  fi
done
# Modules whose own dependencies are missing (InfiniBand, CUDA) are left
# out: UCX skips a module it cannot load.
for m in "$out"/usr/lib/*/ucx/*.so*; do
  [ -e "$m" ] || continue
  if ldd "${m#"$out"}" 2>/dev/null | grep -q "not found"; then rm -f "$m"; fi
done
echo "root:x:0:0:root:/:/sbin/nologin" >"$out/etc/passwd"
echo "zeroshard:x:65532:65532:zeroshard:/tmp:/sbin/nologin" >>"$out/etc/passwd"
printf 'root:x:0:\nzeroshard:x:65532:\n' >"$out/etc/group"
printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$out/etc/nsswitch.conf"
echo "collect_rootfs: $# binaries, $(find "$out" -name '*.so*' -type f | wc -l) libraries, $(du -sh "$out" | cut -f1) in $out"
