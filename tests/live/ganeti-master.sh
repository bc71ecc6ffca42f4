#!/usr/bin/env bash
# A real Ganeti 3.0.2 master on this machine, with the built-in fake hypervisor, for the live tests
# (tests/test_ganeti_master.py, docs/live.md "Against a running Ganeti"). The steps and their traps
# are those of ../shared/specs/live-ganeti.md.
#
#   ganeti-master.sh up       install `ganeti` if absent, create the cluster, wait for LUXI and RAPI
#   ganeti-master.sh up2      the same with two nodes, in Ganeti's virtual cluster mode (each
#                             node's daemons under its own root, GANETI_ROOTDIR/GANETI_HOSTNAME,
#                             on its own address); node2 joined as `gnt-node add` joins a node
#   ganeti-master.sh down     remove instances, destroy the cluster, stop every daemon, undo the
#                             addresses, route, /etc/hosts lines, OS definition and storage folder
#   ganeti-master.sh status   exit 0 and print the settings when a cluster answers, else exit 3
#
# `up` prints the settings as KEY=VALUE lines on stdout (the fixture reads them). When the machine
# refuses (not root, no right to add an address), it prints one line `skip: REASON` on stderr and
# exits 77; any other failure of `up` tears down what was set up and exits 1.
set -euo pipefail
# The single-node cluster is the machine's own; a virtual node's commands set these themselves.
unset GANETI_ROOTDIR GANETI_HOSTNAME

NODE_IP=${EXALLOC_LIVE_NODE_IP:-10.250.0.1}
CLUSTER_IP=${EXALLOC_LIVE_CLUSTER_IP:-10.250.0.100}
CLUSTER_NAME=${EXALLOC_LIVE_CLUSTER_NAME:-exalloc-live-cluster}
RAPI_USER=exalloc
RAPI_PASS=exalloc-live
OS_NAME=exalloc-dummy
OS_DIR=/srv/ganeti/os/$OS_NAME
FILE_DIR=/srv/ganeti/file-storage
SHARED_DIR=/srv/ganeti/shared-file-storage
MARK="# exalloc-live"
STATE=/run/exalloc-live
IALLOCATORS=/usr/lib/ganeti/iallocators
VROOT=/srv/exalloc-vcluster
HERE=$(cd "$(dirname "$0")" && pwd)
# Policy bounds a small test cluster needs: instances without NICs or disks (the defaults ask
# for one NIC), up to 32 GiB.
BOUNDS=min:cpu-count=1,disk-count=0,disk-size=0,memory-size=32,nic-count=0,spindle-use=0/max:cpu-count=8,disk-count=16,disk-size=1048576,memory-size=32768,nic-count=8,spindle-use=12
VPREFIX=10.251.0

log() { echo "ganeti-master: $*" >&2; }

settings() {
  cat <<EOF
NODE=$(hostname)
NODE_IP=$NODE_IP
CLUSTER_NAME=$CLUSTER_NAME
CLUSTER_IP=$CLUSTER_IP
OS=$OS_NAME+default
RAPI=https://$RAPI_USER:$RAPI_PASS@localhost:5080
LUXI=/var/run/ganeti/socket/ganeti-query
EOF
}

refuse() {
  echo "skip: $*" >&2
  exit 77
}

rapi_answers() {
  python3 - "$RAPI_USER" "$RAPI_PASS" <<'EOF'
import base64, ssl, sys, urllib.request
context = ssl.create_default_context()
context.check_hostname = False
context.verify_mode = ssl.CERT_NONE
request = urllib.request.Request("https://localhost:5080/2/info")
token = base64.b64encode(f"{sys.argv[1]}:{sys.argv[2]}".encode()).decode()
request.add_header("Authorization", f"Basic {token}")
try:
    with urllib.request.urlopen(request, context=context, timeout=5) as reply:
        sys.exit(0 if reply.status == 200 else 1)
except Exception:
    sys.exit(1)
EOF
}

luxi_answers() { gnt-cluster info >/dev/null 2>&1; }

wait_for() {
  local what=$1 check=$2 seconds=$3
  for _ in $(seq "$seconds"); do
    if $check; then return 0; fi
    sleep 1
  done
  log "$what did not answer within $seconds s"
  return 1
}

hosts_add() {
  # The hostname must not sit on a loopback line (bootstrap refuses a node IP of 127.x): such a
  # line is kept, commented out with the mark, and restored by hosts_undo. /etc/hosts is written
  # in place (it may be a bind mount that a rename would not replace).
  local me new
  me=$(hostname)
  new=$(awk -v me="$me" -v mark="$MARK" '
    $1 ~ /^127\./ { keep = $1; hit = 0
      for (i = 2; i <= NF; i++) { if ($i == me) hit = 1; else keep = keep " " $i }
      if (hit) { print "#" $0 " " mark; if (keep != $1) print keep " " mark " restored"; next } }
    { print }' /etc/hosts)
  printf '%s\n%s %s %s\n%s %s %s\n' "$new" "$NODE_IP" "$me" "$MARK" "$CLUSTER_IP" "$CLUSTER_NAME" "$MARK" \
    >/etc/hosts
}

hosts_undo() {
  local new
  new=$(awk -v mark="$MARK" '
    index($0, mark " restored") { next }
    index($0, mark) && /^#/ { line = substr($0, 2); print substr(line, 1, length(line) - length(mark) - 1); next }
    index($0, mark) { next }
    { print }' /etc/hosts)
  printf '%s\n' "$new" >/etc/hosts
}

os_definition() {
  os_definition_at "$OS_DIR"
  mkdir -p "$FILE_DIR"
  grep -qx "$FILE_DIR" /etc/ganeti/file-storage-paths 2>/dev/null || echo "$FILE_DIR" >>/etc/ganeti/file-storage-paths
}

os_definition_at() {
  # Ganeti needs an OS for `gnt-instance add`; the fake hypervisor runs nothing, so every script
  # only succeeds (API 20, one variant, no parameters).
  local OS_DIR=$1
  mkdir -p "$OS_DIR"
  echo 20 >"$OS_DIR/ganeti_api_version"
  echo default >"$OS_DIR/variants.list"
  : >"$OS_DIR/parameters.list"
  for script in create export import rename verify; do
    printf '#!/bin/sh\nexit 0\n' >"$OS_DIR/$script"
    chmod 755 "$OS_DIR/$script"
  done
}

cluster_up() { [ -s /var/lib/ganeti/config.data ]; }

install_ganeti() {
  if ! command -v gnt-cluster >/dev/null; then
    log "installing Debian's ganeti (replaces ganeti-htools by ganeti-htools-3.0)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ganeti >/dev/null
  fi
}

up() {
  [ "$(id -u)" -eq 0 ] || refuse "ganeti-master.sh needs root (Ganeti's daemons run as root)"
  if cluster_up || vcluster_up; then
    log "a cluster is already initialised here: run 'down' first"
    exit 1
  fi
  install_ganeti
  mkdir -p "$STATE"
  if ! ip addr add "$NODE_IP/32" dev lo 2>"$STATE/ip.err"; then
    refuse "cannot add the node address $NODE_IP to lo ($(head -c 200 "$STATE/ip.err"))"
  fi
  trap 'log "up failed: tearing down"; down >/dev/null 2>&1 || true; exit 1' ERR
  ip route add unreachable "$CLUSTER_IP/32"
  hosts_add
  os_definition
  local started=$SECONDS
  gnt-cluster init --enabled-hypervisors=fake --master-netdev=lo --master-netmask=32 \
    --enabled-disk-templates=diskless,file --file-storage-dir="$FILE_DIR" \
    --no-etc-hosts --no-ssh-init "$CLUSTER_NAME" >"$STATE/init.log" 2>&1
  wait_for LUXI luxi_answers 60
  # One node: hail's global N+1 check can never pass (FailN1); instances without NICs or disks
  # and many one-vCPU instances on 2 cores need relaxed policy bounds; routed NICs need no bridge.
  gnt-cluster modify --default-iallocator-params=-no-capacity-checks \
    "--ipolicy-bounds-specs=$BOUNDS" --ipolicy-vcpu-ratio=64 -N mode=routed,link=100 \
    >>"$STATE/init.log" 2>&1
  install -m 640 -o gnt-rapi -g gnt-masterd /dev/null /var/lib/ganeti/rapi/users
  echo "$RAPI_USER $RAPI_PASS write" >/var/lib/ganeti/rapi/users
  wait_for RAPI rapi_answers 60
  trap - ERR
  log "cluster $CLUSTER_NAME up in $((SECONDS - started)) s"
  settings
}

# -- two nodes: Ganeti's virtual cluster ---------------------------------------------------------

vcluster_up() { [ -s "$VROOT/node1/var/lib/ganeti/config.data" ]; }

vluxi_answers() { "$VROOT/node1/cmd" gnt-cluster info >/dev/null 2>&1; }

vsettings() {
  cat <<EOF
ROOTDIR=$VROOT/node1
HOSTNAME=node1
NODES=node1,node2
OS=$OS_NAME+default
RAPI=https://$RAPI_USER:$RAPI_PASS@$VPREFIX.10:5080
LUXI=$VROOT/node1/var/run/ganeti/socket/ganeti-query
EOF
}

up2() {
  # tools/vcluster-setup writes each node's root (node1 .10, node2 .11, the cluster .1) and a
  # `cmd` wrapper that runs a command as that node; node2 then joins (tests/live/join-node.py).
  [ "$(id -u)" -eq 0 ] || refuse "ganeti-master.sh needs root (Ganeti's daemons run as root)"
  if cluster_up || vcluster_up; then
    log "a cluster is already initialised here: run 'down' first"
    exit 1
  fi
  install_ganeti
  mkdir -p "$STATE" "$VROOT"
  if ! ip addr add "$VPREFIX.10/32" dev lo 2>"$STATE/ip.err"; then
    refuse "cannot add the node address $VPREFIX.10 to lo ($(head -c 200 "$STATE/ip.err"))"
  fi
  trap 'log "up2 failed: tearing down"; down >/dev/null 2>&1 || true; exit 1' ERR
  ip addr add "$VPREFIX.11/32" dev lo
  ip route add unreachable "$VPREFIX.1/32"
  local hosts
  hosts=$(cat /etc/hosts)
  printf '%s\n%s.10 node1 %s\n%s.11 node2 %s\n%s.1 cluster %s\n' "$hosts" "$VPREFIX" "$MARK" \
    "$VPREFIX" "$MARK" "$VPREFIX" "$MARK" >/etc/hosts
  /usr/lib/ganeti/tools/vcluster-setup -E -N -c 2 -i 0 -p "$VPREFIX" -I /etc/init.d/ganeti \
    "$VROOT" >"$STATE/vcluster.log" 2>&1
  local node started=$SECONDS
  os_definition_at "$OS_DIR" # the OS search path is not one of the node's own paths
  # File storage is not one of the node's own paths either: both nodes keep their instances'
  # files under the one folder (each instance has its own subfolder). That makes the shared
  # file template honest here: both nodes see the same files, as on a cluster's shared file
  # system, so a sharedfile instance can migrate (the one kind of instance hbal moves on this
  # machine: htools moves neither diskless nor file instances, and DRBD has no kernel module).
  mkdir -p "$FILE_DIR" "$SHARED_DIR"
  for node in node1 node2; do
    printf '%s\n%s\n' "$FILE_DIR" "$SHARED_DIR" >"$VROOT/$node/etc/ganeti/file-storage-paths"
  done
  (cd "$VROOT" && node1/cmd gnt-cluster init --enabled-hypervisors=fake --master-netdev=lo \
    --master-netmask=32 --enabled-disk-templates=diskless,file,sharedfile \
    --file-storage-dir="$FILE_DIR" --shared-file-storage-dir="$SHARED_DIR" --no-etc-hosts \
    --no-ssh-init cluster) >"$STATE/init.log" 2>&1
  wait_for LUXI vluxi_answers 60
  "$VROOT/node1/cmd" gnt-cluster modify --default-iallocator-params=-no-capacity-checks \
    "--ipolicy-bounds-specs=$BOUNDS" --ipolicy-vcpu-ratio=64 -N mode=routed,link=100 \
    >>"$STATE/init.log" 2>&1
  "$VROOT/node1/cmd" "PYTHONPATH=/usr/share/ganeti/3.0 /usr/bin/python3 $HERE/join-node.py node2 $VROOT" \
    >>"$STATE/init.log" 2>&1
  install -m 755 "$HERE/oob" "$VROOT/oob"
  "$VROOT/node1/cmd" gnt-node modify --node-parameters "oob_program=$VROOT/oob" node2 \
    >>"$STATE/init.log" 2>&1
  install -m 640 -o gnt-rapi -g gnt-masterd /dev/null "$VROOT/node1/var/lib/ganeti/rapi/users"
  echo "$RAPI_USER $RAPI_PASS write" >"$VROOT/node1/var/lib/ganeti/rapi/users"
  trap - ERR
  log "two-node cluster up in $((SECONDS - started)) s"
  vsettings
}

vdown() {
  [ -d "$VROOT" ] || return 0
  local v="$VROOT/node1/cmd" name
  if vcluster_up; then
    # A node squeeze powered off must be powered on before it may be set online (Ganeti 3.0).
    "$v" gnt-node power -f on node2 >/dev/null 2>&1 || true
    "$v" gnt-node modify -f -O no node2 >/dev/null 2>&1 || true
    for name in $("$v" gnt-instance list --no-headers -o name 2>/dev/null); do
      "$v" gnt-instance remove -f --ignore-failures "$name" >/dev/null 2>&1 || log "could not remove $name"
    done
    "$v" gnt-node remove node2 >/dev/null 2>&1 || log "could not remove node2"
    "$v" gnt-cluster destroy --yes-do-it >/dev/null 2>&1 || log "gnt-cluster destroy failed"
  fi
  (cd "$VROOT" && ./stop-all) >/dev/null 2>&1 || true
  local pidfile pid
  for pidfile in "$VROOT"/node*/var/run/ganeti/*.pid; do
    [ -e "$pidfile" ] || continue
    pid=$(cat "$pidfile" 2>/dev/null || true)
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill "$pid" 2>/dev/null || true; fi
  done
  ip addr del "$VPREFIX.1/32" dev lo 2>/dev/null || true
  ip addr del "$VPREFIX.10/32" dev lo 2>/dev/null || true
  ip addr del "$VPREFIX.11/32" dev lo 2>/dev/null || true
  ip route del unreachable "$VPREFIX.1/32" 2>/dev/null || true
  rm -rf "$VROOT"
}

remove_instances() {
  local name
  for name in $(gnt-instance list --no-headers -o name 2>/dev/null); do
    gnt-instance remove -f --ignore-failures "$name" >/dev/null 2>&1 || log "could not remove $name"
  done
}

stop_pidfiles() {
  # Whatever daemon-util left running, by the pid files Ganeti keeps (never by name).
  local pidfile pid
  for pidfile in /var/run/ganeti/*.pid; do
    [ -e "$pidfile" ] || continue
    pid=$(cat "$pidfile" 2>/dev/null || true)
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill "$pid" 2>/dev/null || true; fi
    rm -f "$pidfile"
  done
}

down() {
  [ "$(id -u)" -eq 0 ] || refuse "ganeti-master.sh needs root"
  vdown
  if cluster_up; then
    remove_instances
    gnt-cluster destroy --yes-do-it >/dev/null 2>&1 || log "gnt-cluster destroy failed"
  fi
  if [ -x /usr/lib/ganeti/daemon-util ]; then /usr/lib/ganeti/daemon-util stop-all >/dev/null 2>&1 || true; fi
  stop_pidfiles
  rm -f /var/lib/ganeti/config.data /var/lib/ganeti/ssconf_* /var/lib/ganeti/rapi/users
  ip addr del "$CLUSTER_IP/32" dev lo 2>/dev/null || true
  ip addr del "$NODE_IP/32" dev lo 2>/dev/null || true
  ip route del unreachable "$CLUSTER_IP/32" 2>/dev/null || true
  grep -q "$MARK" /etc/hosts && hosts_undo
  rm -rf "$OS_DIR" "$FILE_DIR" "$SHARED_DIR"
  rmdir /srv/ganeti/os /srv/ganeti 2>/dev/null || true
  if [ -f /etc/ganeti/file-storage-paths ]; then
    grep -vx "$FILE_DIR" /etc/ganeti/file-storage-paths >"$STATE.paths" || true
    if [ -s "$STATE.paths" ]; then cat "$STATE.paths" >/etc/ganeti/file-storage-paths; else rm -f /etc/ganeti/file-storage-paths; fi
    rm -f "$STATE.paths"
  fi
  # The iallocators the tests install (docs/hail.md's link, the capturing wrapper).
  rm -f "$IALLOCATORS/exalloc-hail" "$IALLOCATORS/exalloc-capture" "$IALLOCATORS/exalloc-served"
  rm -rf "$STATE"
  log "down"
}

status() {
  if cluster_up && luxi_answers && rapi_answers; then
    settings
    exit 0
  fi
  if vcluster_up && vluxi_answers; then
    vsettings
    exit 0
  fi
  echo "no cluster answers" >&2
  exit 3
}

case "${1:-}" in
  up) up ;;
  up2) up2 ;;
  down) down ;;
  status) status ;;
  *)
    echo "usage: $0 up|up2|down|status" >&2
    exit 2
    ;;
esac
