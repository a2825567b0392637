# shellcheck shell=bash
# shellcheck disable=SC2034,SC2154 # settings for realnode.sh and down.sh; pause_ref is realnode.sh's
# What realnode.sh's commands share: the node's settings and small helpers (sourced).
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
root="$(cd "$here/../.." && pwd)"
state="$root/.cluster"
kubeconfig="$state/kubeconfig"
cache="${DDP_CACHE_DIR:-$HOME/.cache/ddp-operator}"
# shellcheck source=hack/cluster/versions.env
source "$here/versions.env"
# The real nodes: `index` (realnode.sh's NODE argument, 0 by default) picks one. real-node-0 lives
# in the host's network namespace and owns what is host-wide (CoreDNS and the API forwarder on
# 198.18.0.1, the fence); real-node-1 in a network namespace of its own, pinned at
# .cluster/realnode-1/netns and joined to the host by a veth pair (ddp-h1 198.19.255.1 on the
# host, ddp-n1 198.19.255.2 in it): traffic between the nodes' pods leaves one namespace and
# enters the other as between machines. It reaches the API and CoreDNS at 198.18.0.1 over that
# link, so it comes up after real-node-0 and goes down before it.

# node_settings NODE: the settings of real-node-NODE (0 or 1).
node_settings() {
  index=$1
  [[ "$index" =~ ^[01]$ ]] || { echo "realnode: NODE is 0 or 1, not $index" >&2; exit 2; }
  node=real-node-$index
  # containerd's root (its images: content and unpacked snapshots) outlives the node, in the
  # cache: a later node finds the trainer image there instead of importing it again (~2.5 min).
  # containerd locks its root: one per node (real-node-1's is a clone of real-node-0's,
  # realnode/second.sh).
  images_root="$cache/containerd-root-$CONTAINERD_VERSION"
  if ((index == 0)); then
    rn="$state/realnode"
    bridge=ddp0
    bridge_mac=02:64:64:70:00:01  # locally administered: ours, fixed (realnode.sh make_bridge)
    subnet=198.18.0.0/24
    gateway=198.18.0.1
    network=ddp
    kubelet_address=127.0.0.1
    cgroup_root=""
    node_kubeconfig="$kubeconfig"
    ns=()
  else
    rn="$state/realnode-$index"
    bridge=ddp$index
    bridge_mac=02:64:64:70:00:0$((index + 1))
    subnet=198.18.$index.0/24
    gateway=198.18.$index.1
    network=ddp$index
    kubelet_address=198.19.255.$((4 * index - 2))
    host_address=198.19.255.$((4 * index - 3))
    cgroup_root="/ddp-real-node-$index"
    node_kubeconfig="$rn/kubeconfig"
    images_root+="-$index"
    ns=(nsenter "--net=$rn/netns")
  fi
  sock="$rn/containerd/containerd.sock"
}
node_settings "${index:-0}"
# The host's end of every node: CoreDNS and the API forwarder listen there (real-node-0's bridge).
cluster_dns=198.18.0.1
pod_net=198.18.0.0/15
service_cidr=10.0.0.0/24
cluster_domain=cluster.local
# The cluster's ports are port0..port0+5 (cluster.sh, same formula: port0 is the API server's);
# the kubelet takes the next two, kube-proxy the two after.
port0=$((20000 + 0x$(printf '%s' "$root" | sha256sum | cut -c9-16) % 1000 * 10))
# The examples' trainer image (examples/*.yaml): realnode.sh trainer tags its build so.
examples_trainer=docker.io/ddp-operator/trainer:cpu
# What kubelet and kube-proxy change of the host's kernel settings; down restores them.
sysctls=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.conf.all.route_localnet
  net.bridge.bridge-nf-call-iptables net.netfilter.nf_conntrack_max net.ipv4.ip_forward)

# shellcheck source=hack/cluster/fds.sh
source "$here/fds.sh"

log() { echo "[realnode $(date +%H:%M:%S)] $*" >&2; }
die() { log "$*"; exit 1; }
kubectl_() { "$bin/kubectl" --kubeconfig "$kubeconfig" "$@"; }
ctr_() { "$bin/ctr" --address "$sock" --namespace k8s.io "$@"; }
alive() { [[ -e /proc/$1 && "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]]; }
pid_of() { [[ -f "$rn/$1.pid" ]] && alive "$(<"$rn/$1.pid")" && cat "$rn/$1.pid"; }

# The node's daemons run on its own binaries only (build.sh real-node: its runc, its shim, its CNI
# plugins), never on a host's Docker or containerd installation that comes first on a PATH (a
# host containerd's shim from /usr/bin once failed every sandbox): they get this PATH, and the
# runtime's shim and runc are named by their full paths (containerd.toml).
tools() {
  bin="$("$here/build.sh" real-node)"
  runc="$bin/runc"
  node_path="$bin:/usr/sbin:/usr/bin:/sbin:/bin"
}

# render TEMPLATE OUT: realnode/TEMPLATE with each setting (an upper-case word between at signs)
# replaced by its value, written to OUT unless OUT holds that already (through a file of its
# own beside OUT, renamed over it).
render() {
  local new
  new="$(mktemp "$2.XXXXXX")" && chmod 0644 "$new"
  sed -e "s|@RN@|$rn|g; s|@SOCK@|$sock|g; s|@BIN@|$bin|g; s|@RUNC@|$runc|g" \
    -e "s|@IMAGES_ROOT@|$images_root|g; s|@PAUSE_REF@|$pause_ref|g; s|@NODE@|$node|g" \
    -e "s|@BRIDGE@|$bridge|g; s|@SUBNET@|$subnet|g; s|@GATEWAY@|$gateway|g" \
    -e "s|@SERVICE_CIDR@|$service_cidr|g; s|@CLUSTER_DOMAIN@|$cluster_domain|g" \
    -e "s|@KUBECONFIG@|$node_kubeconfig|g; s|@KUBELET_PORT@|$((port0 + 6))|g" \
    -e "s|@NETWORK@|$network|g; s|@KUBELET_ADDRESS@|$kubelet_address|g" \
    -e "s|@CLUSTER_DNS@|$cluster_dns|g; s|@CGROUP_ROOT@|${cgroup_root:-/}|g" \
    -e "s|@HEALTHZ_PORT@|$((port0 + 7))|g; s|@PROXY_HEALTHZ_PORT@|$((port0 + 8))|g" \
    -e "s|@PROXY_METRICS_PORT@|$((port0 + 9))|g" "$here/realnode/$1" >"$new"
  if grep -q '@[A-Z_]*@' "$new"; then die "$2: a setting of $1 is not rendered: $new"; fi
  # Written only when it changes: kube-proxy exits when its configuration file is rewritten
  # ("content of the proxy server's configuration file was updated"), so a second up must not.
  if cmp -s "$new" "$2"; then rm -f "$new"; else mv -f "$new" "$2"; fi
}

# hold_lock: waits for, then holds until it exits, this checkout's lock of the node
# (.cluster/realnode.lock): one command that changes the node at a time. Two ups at once (two
# test sessions, a second `make cluster-up`) once raced on the same files (CI: "mv: cannot stat
# kube-proxy.yaml.new"). The daemons it starts do not hold it (close_inherited_fds).
# real-node-1's commands hold its own lock (.cluster/realnode-1.lock) after real-node-0's, which
# also covers what is host-wide and the images of every node.
hold_lock() {
  mkdir -p "$state"
  local lock locks=()
  # A down of real-node-1 that real-node-0's down runs holds the first already.
  [[ -n "${DDP_REALNODE_LOCKED:-}" ]] || locks+=(realnode)
  if [[ -n "${1:-}" ]]; then locks+=("realnode-$1"); fi
  for lock in "${locks[@]}"; do
    exec {lock_fd}>>"$state/$lock.lock"
    flock "$lock_fd" || die "cannot lock $state/$lock.lock"
  done
}

# daemon NAME CMD...: starts CMD in a session of its own, its output in NAME.log, its pid in
# NAME.pid, unless it runs; on the node's PATH (tools), with none of the caller's open files
# (close_inherited_fds). Adds NAME to `started`, what a failed up stops again.
started=()
daemon() {
  local name=$1 cmd; shift
  pid_of "$name" >/dev/null && return 0
  cmd="$(command -v "$1")" || die "$1 is missing (hack/prereqs.sh cluster names what to install)"
  shift
  (close_inherited_fds && exec setsid "${ns[@]}" env PATH="$node_path" "$cmd" "$@") \
    >>"$rn/$name.log" 2>&1 </dev/null &
  echo $! >"$rn/$name.pid"
  started+=("$name")
}

# stop NAME: SIGTERM, then SIGKILL after 20 s, the process recorded in NAME.pid.
stop() {
  local pid t0=$SECONDS
  pid="$(pid_of "$1")" || { rm -f "$rn/$1.pid"; return 0; }
  kill -TERM "$pid"
  while alive "$pid"; do
    if ((SECONDS - t0 > 20)); then kill -KILL "$pid"; fi
    sleep 0.2
  done
  rm -f "$rn/$1.pid"
  log "$1 stopped"
}

# Chains named KUBE-* (kubelet's and kube-proxy's) in iptables and ip6tables, as "CMD TABLE CHAIN".
kube_chains() {
  local cmd table
  for cmd in iptables ip6tables; do
    command -v "$cmd-save" >/dev/null || continue
    for table in filter nat mangle; do
      "$cmd-save" -t "$table" 2>/dev/null | awk -v c="$cmd" -v t="$table" \
        '/^:KUBE-/ { print c, t, substr($1, 2) }'
    done
  done
}

# The kube-proxy and kubelet processes ("PID COMMAND", one a line) running while KUBE-* chains
# exist: theirs; false if none runs or there are no such chains.
kube_chain_keepers() {
  [[ -n "$(kube_chains)" ]] || return 1
  # Those of the host's network namespace only: real-node-1's keep chains of its own namespace.
  local here_net line found=""
  here_net="$(readlink /proc/self/ns/net)"
  while read -r line; do
    [[ -n "$line" && "$(readlink "/proc/${line%% *}/ns/net" 2>/dev/null)" == "$here_net" ]] &&
      found+="$line"$'\n'
  done < <(pgrep -a -x kube-proxy; pgrep -a -x kubelet)
  [[ -n "$found" ]] && printf '%s' "$found"
}
