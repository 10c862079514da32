#!/usr/bin/env bash
# netlab: test hosts on one machine. Each host is a network namespace with
# one interface, eth0, a veth pair to a bridge that lives in a namespace of
# its own; nothing is made in the caller's namespace, so no traffic leaves
# these hosts. Each host's link is shaped in both directions with tc (rate;
# delay only where the kernel has sch_netem) and can lose packets or be cut
# (nftables in the host). docs/netlab.md has the whole story.
#
#   tools/netlab.sh run [--profile 10g|1g|none|custom] [--rate R] [--delay D]
#                       [--loss PCT] --hosts "srv0 srv1 node0 node1" -- CMD...
#       makes the lab, runs CMD in the caller's namespace with NETLAB_* set
#       (below), then removes everything it made, whatever happens (EXIT,
#       INT, TERM; the namespaces' keeper processes also die within a second
#       if this script is SIGKILLed). Exit status: CMD's; 77 with
#       "SKIP: <reason>" where namespaces cannot be made; 2 for bad usage.
#   tools/netlab.sh exec HOST CMD...     run CMD inside HOST (from within CMD)
#   tools/netlab.sh link HOST down|up    carrier off/on at the bridge port
#   tools/netlab.sh link HOST loss PCT   drop PCT % of packets each way (0: none)
#   tools/netlab.sh link HOST rate R     change the shaping rate (tc units)
#   tools/netlab.sh link HOST cut [PEER...]  drop everything (or to/from PEERs)
#   tools/netlab.sh link HOST heal       undo every cut of HOST
#   tools/netlab.sh bytes HOST PEER      bytes HOST sent to PEER over eth0
#   tools/netlab.sh dropped HOST loss|cut  packets dropped so far by HOST's
#                                        loss or cut rules (both directions; heal and loss reset them)
#   tools/netlab.sh clean                remove labs whose owner is gone
#   tools/netlab.sh check                exit 0 if a lab can be made, else 77
#
# In CMD: NETLAB_PREFIX (unique per run), NETLAB_DIR (state), NETLAB_HOSTS,
# NETLAB_IP_<host> (10.77.0.x), NETLAB_DEV=eth0, NETLAB_PROFILE,
# NETLAB_RATE, NETLAB_DELAY_US (the delay really applied) and
# NETLAB_DELAY_NOTE (why it is 0 when the profile wanted more).
# Host names: [a-z][a-z0-9_]*, at most 12 characters, at most 200 hosts.
set -uo pipefail
export PATH="$PATH:/usr/sbin:/sbin"  # ip, tc, nft (Bazel tests get PATH=/bin:/usr/bin)
ME="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
MARK=zsnetlab  # argv[0] of every keeper process: zsnetlab-<prefix>-<host>

die() { echo "netlab: $*" >&2; exit 2; }
skip() { echo "SKIP: $*"; exit 77; }
need_tools() {
  local t
  for t in ip tc nft unshare nsenter; do
    command -v "$t" >/dev/null || skip "'$t' is not installed (tools/bootstrap.sh installs iproute2, nftables, util-linux)"
  done
}

# --- state of a running lab -------------------------------------------------
lab_dir() { [ -n "${NETLAB_DIR:-}" ] && [ -d "$NETLAB_DIR" ] || die "not inside 'netlab.sh run' (NETLAB_DIR is not set)"; }
pid_of() {  # keeper pid of host $1 (or "bridge")
  local f="$NETLAB_DIR/pid.$1"
  [ -f "$f" ] || die "no host '$1' in this lab (hosts: ${NETLAB_HOSTS:-?})"
  cat "$f"
}
in_ns() { local p; p=$(pid_of "$1") || exit 2; shift; nsenter --net="/proc/$p/ns/net" -- "$@"; }
ip_of() { local v="NETLAB_IP_$1"; [ -n "${!v:-}" ] || die "no host '$1' in this lab"; echo "${!v}"; }

# --- making hosts -------------------------------------------------------------
start_keeper() {  # name: starts a process alone in a new netns; its pid goes to pid.<name>
  local name="$1" fifo="$NETLAB_DIR/ready.$1" pid
  mkfifo "$fifo" || return 1
  exec 3<>"$fifo"  # read-write: opening cannot block if the keeper never starts
  # The keeper lives while its owner (this script) does, then exits, and the
  # namespace goes with the last process in it.
  unshare --net -- bash -c 'echo $$ >"$1"; while kill -0 "$2" 2>/dev/null; do sleep 0.5; done' \
    "$MARK-$NETLAB_PREFIX-$name" "$fifo" "$OWNER" </dev/null >/dev/null 2>&1 &
  disown $!
  read -r -t 10 -u 3 pid || { exec 3<&-; return 1; }
  exec 3<&-
  rm -f "$fifo"
  echo "$pid" >"$NETLAB_DIR/pid.$name"
}

profile() {  # sets RATE, DELAY_US, LOSS from --profile and overrides
  case "$PROFILE" in
    10g) RATE=${RATE:-10gbit}; DELAY_US=${DELAY_US:-50} ;;
    1g) RATE=${RATE:-1gbit}; DELAY_US=${DELAY_US:-200} ;;
    none) RATE=${RATE:-}; DELAY_US=${DELAY_US:-0} ;;
    custom) [ -n "${RATE:-}" ] || die "--profile custom needs --rate (e.g. 400mbit)"; DELAY_US=${DELAY_US:-0} ;;
    *) die "unknown --profile '$PROFILE' (10g, 1g, none, custom)" ;;
  esac
  LOSS=${LOSS:-0}
}

shape() {  # ns-name dev rate delay_us: the egress qdisc of dev (so delay is per direction)
  local host="$1" dev="$2" rate="$3" delay="$4" burst
  in_ns "$host" tc qdisc del dev "$dev" root 2>/dev/null
  [ -z "$rate" ] && [ "$delay" = 0 ] && return 0
  if [ "$delay" != 0 ]; then
    in_ns "$host" tc qdisc add dev "$dev" root netem delay "${delay}us" ${rate:+rate "$rate"} limit 100000
    return
  fi
  # burst: at least one timer tick (1 ms) of traffic, and a 64 KiB GSO packet.
  burst=$(rate_bytes_per_ms "$rate"); [ "$burst" -lt 131072 ] && burst=131072
  in_ns "$host" tc qdisc add dev "$dev" root tbf rate "$rate" burst "$burst" latency 20ms
}
check_rate() {  # exits 2 naming a rate tc or rate_bytes_per_ms would not take
  [[ "${1,,}" =~ ^[0-9]+(gbit|mbit|kbit|bit|gbps|mbps|kbps)?$ ]] ||
    die "rate '$1': a whole number and a unit, such as 10gbit, 400mbit, 100mbps"
}
rate_bytes_per_ms() {  # tc rate (e.g. 10gbit, 400mbit, 100mbps) -> bytes per ms
  local r="${1,,}" n u
  n="${r%%[a-z]*}"; u="${r#"$n"}"
  case "$u" in
    gbit) echo $((n * 1000000000 / 8000)) ;; mbit) echo $((n * 1000000 / 8000)) ;;
    kbit) echo $((n * 1000 / 8000)) ;; bit | "") echo $((n / 8000)) ;;
    gbps) echo $((n * 1000000)) ;; mbps) echo $((n * 1000)) ;; kbps) echo "$n" ;;
    *) die "rate '$1': use tc units such as 10gbit, 400mbit, 100mbps" ;;
  esac
}

delay_possible() {  # can this kernel delay packets? (sch_netem)
  in_ns bridge tc qdisc add dev lo root netem delay 1us 2>/dev/null || return 1
  in_ns bridge tc qdisc del dev lo root 2>/dev/null
  return 0
}

# Loss and cuts act on the wire, not in the sending stack (a drop there would
# be an error the sender sees): what leaves a host is dropped as it enters
# the bridge port (netdev ingress of pN, in the bridge namespace), what
# comes to it as it enters eth0 (netdev ingress in the host).
host_tables() {  # host port: chains for loss and cuts; per-peer byte counts
  local h="$1" port="$2" p
  {
    echo "table netdev netlab {"
    echo "  chain cut { }"; echo "  chain loss { }"
    echo "  chain in { type filter hook ingress device \"eth0\" priority 0; jump cut; jump loss; }"
    echo "}"
    echo "table inet netlab {"
    echo "  chain acct { type filter hook output priority 0;"
    for p in $HOSTS; do [ "$p" = "$h" ] || echo "    oifname \"eth0\" ip daddr $(ip_of "$p") counter comment \"$p\""; done
    echo "  }"
    echo "}"
  } | in_ns "$h" nft -f - || return 1
  {
    echo "table netdev $h {"
    echo "  chain cut { }"; echo "  chain loss { }"
    echo "  chain in { type filter hook ingress device \"$port\" priority 0; jump cut; jump loss; }"
    echo "}"
  } | in_ns bridge nft -f -
}
# side HOST out|in add|flush|list CHAIN [RULE...]: nft on chain CHAIN of
# one side of HOST's link, "out" (what leaves the host: its bridge port's
# table) or "in" (what comes to it: the host's own table).
side() {
  local h="$1" d="$2" op="$3" chain="$4" ns="$1" table=netlab what=chain
  shift 4
  [ "$d" = out ] && { ns=bridge; table="$h"; }
  [ "$op" = add ] && what=rule
  in_ns "$ns" nft "$op" "$what" netdev "$table" "$chain" "$@"
}

set_loss() {  # host pct: drop pct % (up to 2 decimals) each way
  local h="$1" pct="$2" n d
  [[ "$pct" =~ ^[0-9]+(\.[0-9]{1,2})?$ ]] || die "loss '$pct': a percentage such as 2 or 0.5"
  n=$(awk -v p="$pct" 'BEGIN { printf "%d", p * 100 + 0.5 }')
  [ "$n" -le 10000 ] || die "loss '$pct' is above 100"
  for d in out in; do
    side "$h" $d flush loss || return 1
    [ "$n" -eq 0 ] || side "$h" $d add loss numgen random mod 10000 "<" "$n" counter drop || return 1
  done
}

set_cut() {  # host [peer...]: drop everything, or what goes to/comes from peers
  local h="$1" p; shift
  if [ $# -eq 0 ]; then
    side "$h" out add cut counter drop && side "$h" in add cut counter drop
    return
  fi
  for p in "$@"; do
    side "$h" out add cut ip daddr "$(ip_of "$p")" counter drop || return 1
    side "$h" in add cut ip saddr "$(ip_of "$p")" counter drop || return 1
  done
}

stop_cmd() { [ -n "${CMD_PID:-}" ] && kill -"$1" "$CMD_PID" 2>/dev/null; }
teardown() {
  local f p q round
  local -A ours=() keepers=()
  trap - EXIT INT TERM
  [ -n "${NETLAB_DIR:-}" ] && [ -d "$NETLAB_DIR" ] || return 0
  for f in "$NETLAB_DIR"/pid.*; do
    [ -f "$f" ] || continue
    p=$(cat "$f"); keepers[$p]=1
    q=$(readlink "/proc/$p/ns/net" 2>/dev/null) && ours[$q]=1
  done
  rm -f "$NETLAB_DIR"/pid.*  # no `exec` finds a host from now on
  # Every other process inside our namespaces (servers, workers), twice for
  # one entering now, while the keepers still hold the namespaces: a dead
  # namespace's inode number is soon reused by another lab's.
  if [ ${#ours[@]} -gt 0 ]; then
    for round in 1 2; do
      for q in /proc/[0-9]*; do
        p=${q#/proc/}
        [ -n "${keepers[$p]:-}" ] && continue
        f=$(readlink "$q/ns/net" 2>/dev/null) || continue
        [ -n "${ours[$f]:-}" ] && kill -KILL "$p" 2>/dev/null
      done
      [ $round = 1 ] && sleep 0.1
    done
  fi
  for p in "${!keepers[@]}"; do kill -KILL "$p" 2>/dev/null; done
  rm -rf "$NETLAB_DIR"
}

# Not root: everything runs in a user namespace of our own, where we are
# (and tc, nft, nsenter see us as) root.
as_root() {  # subcommand args...: re-runs this script so, once
  [ "$(id -u)" = 0 ] && return 0
  unshare --user --map-root-user true 2>/dev/null ||
    skip "not root, and this machine allows no user namespaces (unshare -r)"
  exec unshare --user --map-root-user -- "$ME" "$@"
}

cmd_check() {
  need_tools
  local probe
  probe=$(unshare --net -- sh -c 'ip link set lo up && ip link add zsprobe type veth peer name zsprobe1 && tc qdisc add dev zsprobe root tbf rate 1gbit burst 128k latency 20ms && nft add table inet zsprobe && echo ok' 2>&1)
  [ "$probe" = ok ] || skip "cannot make network namespaces with veth, tc and nftables here ($(echo "$probe" | head -1))"
}

cmd_run() {
  PROFILE=10g HOSTS="" RATE="" DELAY_US="" LOSS=""
  while [ $# -gt 0 ]; do
    case "$1" in
      --profile) PROFILE="${2:?}"; shift 2 ;;
      --hosts) HOSTS="${2:?}"; shift 2 ;;
      --rate) RATE="${2:?}"; shift 2 ;;
      --delay) DELAY_US="${2:?}"; DELAY_US="${DELAY_US%us}"; shift 2 ;;
      --loss) LOSS="${2:?}"; shift 2 ;;
      --) shift; break ;;
      *) die "run: unknown argument '$1' (see the top of $ME)" ;;
    esac
  done
  [ $# -gt 0 ] || die "run: no command after --"
  [ -n "$HOSTS" ] || die "run: --hosts \"h1 h2 ...\" is required"
  [[ "$DELAY_US" =~ ^[0-9]*$ ]] || die "--delay '$DELAY_US': microseconds, e.g. 50"
  profile
  [ -z "$RATE" ] || check_rate "$RATE"
  local h i=0 seen=" "
  for h in $HOSTS; do
    [[ "$h" =~ ^[a-z][a-z0-9_]{0,11}$ ]] || die "host name '$h': [a-z][a-z0-9_]*, at most 12 characters"
    [[ "$seen" == *" $h "* ]] && die "host '$h' named twice"
    [ "$h" = bridge ] && die "host name 'bridge' is reserved"
    seen="$seen$h "; i=$((i + 1))
  done
  [ "$i" -le 200 ] || die "at most 200 hosts"
  cmd_check >/dev/null || skip "$(cmd_check)"
  cmd_clean >/dev/null 2>&1

  OWNER=$$
  NETLAB_PREFIX="nl$$x$(printf '%04x' $((RANDOM)))"
  export NETLAB_PREFIX
  export NETLAB_DIR="${TMPDIR:-/tmp}/netlab-$NETLAB_PREFIX"
  export NETLAB_HOSTS="$HOSTS" NETLAB_DEV=eth0 NETLAB_PROFILE="$PROFILE" NETLAB_RATE="$RATE"
  trap teardown EXIT
  trap 'stop_cmd INT; exit 130' INT
  trap 'stop_cmd TERM; exit 143' TERM
  mkdir -p "$NETLAB_DIR" || die "cannot make $NETLAB_DIR"
  echo "$OWNER" >"$NETLAB_DIR/owner"
  start_keeper bridge || skip "cannot start a network namespace"
  in_ns bridge ip link set lo up
  in_ns bridge ip link add br0 type bridge || exit 1
  in_ns bridge ip link set br0 up
  export NETLAB_DELAY_US=0 NETLAB_DELAY_NOTE=""
  if [ "$DELAY_US" != 0 ]; then
    if delay_possible; then
      NETLAB_DELAY_US=$DELAY_US
    else
      NETLAB_DELAY_NOTE="no delay: this kernel has no sch_netem (tc netem), and nothing else here can hold packets back; profile $PROFILE wants ${DELAY_US} us"
      echo "netlab: note: $NETLAB_DELAY_NOTE" >&2
    fi
  fi
  i=0
  for h in $HOSTS; do
    i=$((i + 1))
    export "NETLAB_IP_$h=10.77.$((i / 250)).$((i % 250 + 1))"
  done
  i=0
  for h in $HOSTS; do
    i=$((i + 1))
    start_keeper "$h" || exit 1
    local hp; hp=$(pid_of "$h")
    in_ns bridge ip link add "p$i" type veth peer name eth0 netns "$hp" || exit 1
    in_ns bridge ip link set "p$i" master br0 up || exit 1
    echo "p$i" >"$NETLAB_DIR/port.$h"
    in_ns "$h" ip link set lo up
    in_ns "$h" ip addr add "$(ip_of "$h")/16" dev eth0 || exit 1
    in_ns "$h" ip link set eth0 up || exit 1
    shape "$h" eth0 "$RATE" "$NETLAB_DELAY_US" || exit 1
    shape bridge "p$i" "$RATE" "$NETLAB_DELAY_US" || exit 1
    host_tables "$h" "p$i" || exit 1
    set_loss "$h" "$LOSS" || exit 1
  done
  echo "netlab: $NETLAB_PREFIX: hosts $HOSTS; profile $PROFILE (rate ${RATE:-unshaped}, delay ${NETLAB_DELAY_US} us, loss ${LOSS} %)" >&2
  # CMD in the background so that INT/TERM reach the traps at once; CMD gets
  # the signal too. (Its stdin is /dev/null.)
  "$@" &
  CMD_PID=$!
  wait "$CMD_PID"
  exit $?
}

cmd_link() {
  lab_dir
  local h="${1:?link HOST ...}" what="${2:?link HOST down|up|loss|rate|cut|heal}" port p
  port=$(cat "$NETLAB_DIR/port.$h" 2>/dev/null) || die "no host '$h' in this lab"
  shift 2
  case "$what" in
    down) in_ns bridge ip link set "$port" down ;;
    up) in_ns bridge ip link set "$port" up ;;
    loss) set_loss "$h" "${1:?loss PCT}" ;;
    rate) check_rate "${1:?rate R}"; shape "$h" eth0 "$1" "${NETLAB_DELAY_US:-0}" && shape bridge "$port" "$1" "${NETLAB_DELAY_US:-0}" ;;
    cut) set_cut "$h" "$@" ;;
    heal) side "$h" out flush cut && side "$h" in flush cut ;;
    *) die "link: unknown action '$what' (down, up, loss PCT, rate R, cut [PEER...], heal)" ;;
  esac
}

cmd_bytes() {
  lab_dir
  local h="${1:?bytes HOST PEER}" p="${2:?bytes HOST PEER}" n
  ip_of "$p" >/dev/null
  n=$(in_ns "$h" nft list chain inet netlab acct | grep "comment \"$p\"" | sed -n 's/.* bytes \([0-9]*\).*/\1/p')
  [ -n "$n" ] || die "no byte count from '$h' to '$p'"
  echo "$n"
}

cmd_dropped() {  # host loss|cut: packets the rules dropped on both sides so far
  lab_dir
  local h="${1:?dropped HOST loss|cut}" c="${2:?dropped HOST loss|cut}" d n=0 k
  case "$c" in loss | cut) ;; *) die "dropped: 'loss' or 'cut', not '$c'" ;; esac
  [ -f "$NETLAB_DIR/port.$h" ] || die "no host '$h' in this lab"
  for d in out in; do
    for k in $(side "$h" $d list "$c" | sed -n 's/.* packets \([0-9]*\) bytes.*/\1/p'); do
      n=$((n + k))
    done
  done
  echo "$n"
}

cmd_clean() {  # what labs whose owner died (SIGKILL) left: processes in their hosts
  local q cmd env prefix owner mine
  mine=$(readlink /proc/self/ns/net)
  for q in /proc/[0-9]*; do
    [ "$(readlink "$q/ns/net" 2>/dev/null)" = "$mine" ] && continue
    cmd=$(tr '\0' ' ' 2>/dev/null <"$q/cmdline") || continue
    env=$(tr '\0' '\n' 2>/dev/null <"$q/environ" | grep '^NETLAB_PREFIX=')
    if [[ "$cmd" == "bash -c "*" $MARK-"* ]]; then
      prefix=${cmd#* $MARK-}; prefix=${prefix%%-*}
    elif [ -n "$env" ]; then
      prefix=${env#NETLAB_PREFIX=}
    else
      continue
    fi
    [[ "$prefix" =~ ^nl([0-9]+)x[0-9a-f]+$ ]] || continue
    owner=${BASH_REMATCH[1]}
    [ -d "/proc/$owner" ] && continue  # (kill -0 would say no for another user's)
    echo "netlab: removing ${q#/proc/} ($cmd) of stale lab $prefix" >&2
    kill -KILL "${q#/proc/}" 2>/dev/null
  done
  for q in "${TMPDIR:-/tmp}"/netlab-nl*; do
    [ -f "$q/owner" ] || continue
    [ -d "/proc/$(cat "$q/owner")" ] || rm -rf "$q"
  done
  return 0
}

case "${1:-}" in
  run | check) as_root "$@" ;;
esac
case "${1:-}" in
  run) shift; cmd_run "$@" ;;
  exec)
    shift; lab_dir; h="${1:?exec HOST CMD...}"; shift; p=$(pid_of "$h") || exit 2
    exec nsenter --net="/proc/$p/ns/net" -- "$@" ;;
  link) shift; cmd_link "$@" ;;
  bytes) shift; cmd_bytes "$@" ;;
  dropped) shift; cmd_dropped "$@" ;;
  clean) cmd_clean ;;
  check) cmd_check; echo "netlab: network namespaces, veth, tc and nftables work here" ;;
  *) die "usage: netlab.sh run|exec|link|bytes|clean|check ... (see the top of $ME)" ;;
esac
