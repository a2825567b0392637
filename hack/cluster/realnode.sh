#!/usr/bin/env bash
# The real nodes beside the kwok nodes of the local cluster (hack/cluster/cluster.sh): `realnode.sh
# up|down|status|resync [NODE]|image|trainer [NAME=VALUE]...|operator|foreign NAME|load ...|netpol|
# kubelet stop|start [NODE]|link cut|heal NODE`. NODE 0 (the default) is real-node-0, described below;
# 1 is real-node-1, the same in a network namespace of its own (realnode/lib.sh,
# realnode/second.sh): it needs real-node-0 up, and real-node-0's down takes it down first. Images
# go into every running node.
# up:     builds (or reuses) kubelet, kube-proxy, containerd, ctr, the CNI plugins, CoreDNS and
#         netpol (build.sh real-node) and the pause image, then starts containerd and a kubelet that
#         registers node real-node-0 (label ddp-operator.io/node=real; no taint: the fake nodes
#         have them, so a pod that asks for nothing only they have lands here) with the cluster
#         of .cluster/kubeconfig. The builds come first; each wait after them is measured from
#         its own start (DDP_NODE_WAIT seconds, 180 by default), and a failed up stops what it
#         started (the whole node when it started it from nothing). Pods get addresses of 198.18.0.0/24 on the bridge ddp0
#         (routes to 198.18.0.0/15 and the Service range only: no way off the host).
#         Cluster DNS: CoreDNS on the bridge's address 198.18.0.1:53 only, answering for
#         cluster.local from the cluster's API and for nothing else (no forwarding); the kubelet
#         gives it to the pods (clusterDNS) and no host resolver (an empty resolvConf).
#         The API server from the pods: the `kubernetes` Service (10.0.0.1:443, in-cluster config)
#         leads, through kube-proxy (iptables mode), to its endpoint 198.18.0.1:<API port>
#         (cluster.sh advertises that address), where socat forwards to the API server, which
#         listens on loopback only.
#         NetworkPolicy: netpol (hack/cluster/netpol) enforces it for the node's pods, beside the
#         bridge CNI; it fails closed (while it is down, new connections of the pods a policy
#         selects are dropped). `netpol stop|start` stops and starts it.
#         Image pulls go to a closed port on loopback (realnode/hosts.toml): only images built
#         here and imported run; pods use IfNotPresent or Never.
#         Everything lives in .cluster/realnode/ but what kubelet and containerd put at fixed
#         places (/var/log/containers, /run/containerd/s, /var/lib/cni/results,
#         /var/lib/kubelet/device-plugins/kubelet.sock, cgroups "kubepods", iptables chains
#         KUBE-*, a few sysctls), which down undoes (realnode/down.sh).
# down:   deletes the node's pods and the Node, stops every process, removes every container,
#         mount, the bridge, cgroups, iptables chains and restores the sysctls.
# image | trainer [NAME=VALUE]... | operator: builds (or reuses) that image (hack/cluster/image.sh:
#         image is its Debian Python 3.11 base, the others their Dockerfiles built with buildah),
#         imports it when the node runs and prints its name. The trainer image of the default
#         build arguments is tagged ddp-operator/trainer:cpu too, the examples' image.
# foreign NAME: likewise the image of tests/images/NAME/Dockerfile (image.sh foreign NAME), one
#         that carries nothing of the project, named ddp-operator.io/foreign-NAME:<key>.
# load ARCHIVE IMAGE NAME: an image archive image.sh built, imported, and named NAME as well
#         (hack/release.sh's stand-in for a registry).
# status: says what runs.
# kubelet stop|start [NODE]: a node whose kubelet is gone while its containers run on (a lost node
#         as the control plane sees it: no heartbeat); start brings it back (`up`).
# link cut|heal NODE: real-node-1's link to the host down (a partition: no heartbeat, no pod
#         traffic either way, its containers running on) and up again. The faults of the tests
#         of a lost node (tests/test_realnode_lost_node.py).
# The configuration files are the templates in realnode/. tests/test_realnode*.py run pods and
# DDP jobs on the node and check that down leaves nothing. Needs root, socat and iptables, for
# the images debootstrap and buildah (hack/prereqs.sh cluster checks them all); its runc is its
# own (build.sh real-node), and its daemons take nothing from a host's PATH (realnode/lib.sh).
set -euo pipefail
case "${1:-}" in
  up | down | status | resync) index="${2:-0}" ;;
  netpol | kubelet | link) index="${3:-0}" ;;
esac
# shellcheck source=hack/cluster/realnode/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/realnode/lib.sh"
# shellcheck source=hack/cluster/realnode/down.sh
source "$here/realnode/down.sh"
# shellcheck source=hack/cluster/realnode/second.sh
source "$here/realnode/second.sh"
# shellcheck source=hack/cluster/realnode/images.sh
source "$here/realnode/images.sh"

write_configs() {
  mkdir -p "$rn/containerd/certs.d/_default" "$rn/cni/net.d" "$rn/kubelet" "$rn/pod-logs" \
    "$rn/runc" "$rn/coredns"
  render containerd.toml "$rn/containerd/config.toml"
  render hosts.toml "$rn/containerd/certs.d/_default/hosts.toml"
  render 10-ddp.conflist "$rn/cni/net.d/10-ddp.conflist"
  render kubelet.yaml "$rn/kubelet/config.yaml"
  render kube-proxy.yaml "$rn/kube-proxy.yaml"
  render Corefile "$rn/coredns/Corefile"
  echo "# No host resolver for the pods (kubelet resolvConf)." >"$rn/kubelet/resolv.conf"
}

# The bridge with its gateway address before the first pod (the CNI bridge plugin finds it and
# keeps it), for CoreDNS and the API forwarder to listen on. Its MAC address is set, so that it
# never changes: a bridge without one takes the lowest of its ports', so a pod coming or going
# changed it, and the pods' ARP entries for the gateway went on naming the old one; their packets
# to CoreDNS were lost until those entries expired (5 to 10 s; seen as a torch TCPStore server
# blocked for 10 s on a reverse lookup of a new client).
make_bridge() {
  if ! "${ns[@]}" ip link show "$bridge" >/dev/null 2>&1; then
    "${ns[@]}" ip link add "$bridge" address "$bridge_mac" type bridge
  fi
  "${ns[@]}" ip link set "$bridge" address "$bridge_mac"
  if ! "${ns[@]}" ip -4 addr show dev "$bridge" | grep -qF " $gateway/"; then
    "${ns[@]}" ip addr add "$gateway/${subnet#*/}" dev "$bridge"
  fi
  "${ns[@]}" ip link set "$bridge" up
}

# wait_listen NAME PROTO ADDRESS:PORT: until NAME listens there.
wait_listen() {
  local t0=$SECONDS
  until [[ -n "$("${ns[@]}" ss -Hln"$2" "src $3")" ]]; do
    alive "$(<"$rn/$1.pid")" || die "$1 exited: $rn/$1.log"
    ((SECONDS - t0 < 60)) || die "$1 does not listen on $3 in 60s: $rn/$1.log"
    sleep 0.2
  done
}

start_coredns() {
  # It serves once its informers have synced with the API (or after 5 s without).
  daemon coredns "$bin/coredns" -conf "$rn/coredns/Corefile"
  wait_listen coredns u "$gateway:53"
}

# The API server's port on the bridge's address, for the pods (its endpoint in the `kubernetes`
# Service); the API server itself listens on loopback only.
start_api_forward() {
  daemon api-forward socat "TCP-LISTEN:$port0,bind=$gateway,reuseaddr,fork" "TCP:127.0.0.1:$port0"
  wait_listen api-forward t "$gateway:$port0"
}

# The NetworkPolicy engine (hack/cluster/netpol): ready once it has written its rules for the
# pods a policy selects (none at first). It fails closed: while it is down, new connections of
# those pods are dropped (`realnode.sh netpol stop|start` for the tests that prove it).
start_netpol() {
  local t0=$SECONDS
  daemon netpol "$bin/netpol" -kubeconfig "$node_kubeconfig" -node "$node"
  until grep -q "rules written" "$rn/netpol.log" 2>/dev/null; do
    alive "$(<"$rn/netpol.pid")" || die "netpol exited: $rn/netpol.log"
    ((SECONDS - t0 < 60)) || die "netpol not ready in 60s: $rn/netpol.log"
    sleep 0.2
  done
}

start_containerd() {
  daemon containerd "$bin/containerd" --config "$rn/containerd/config.toml"
  until "$bin/ctr" --address "$sock" version >/dev/null 2>&1; do
    alive "$(<"$rn/containerd.pid")" || die "containerd exited: $rn/containerd.log"
    sleep 0.2
  done
}

# What of the host's fixed places was there before the first up, for down to leave as it was.
record_host() {
  [[ -e "$rn/host.recorded" ]] && return 0
  [[ -d /run/containerd ]] || touch "$rn/no-run-containerd"
  [[ -d /var/log/containers ]] || touch "$rn/no-var-log-containers"
  [[ -d /var/lib/cni ]] || touch "$rn/no-var-lib-cni"
  [[ -d /var/lib/kubelet ]] || touch "$rn/no-var-lib-kubelet"
  # KUBE-* chains belong to whichever kube-proxy and kubelet run on the host: the node's own
  # would rewrite a running one's. Those that no process keeps are a node's that was not taken
  # down (its processes gone with a restart of the machine's process tree): down removes them.
  local keeper
  if keeper="$(kube_chain_keepers)"; then
    rm -rf --one-file-system "$rn"
    die "this host runs its own ${keeper//$'\n'/, }: the real node's kube-proxy and kubelet" \
      "would rewrite its iptables chains (KUBE-*); test against that cluster (KUBECONFIG) instead"
  fi
  if [[ -n "$(kube_chains)" ]]; then
    log "KUBE-* chains that no running kube-proxy or kubelet keeps (a node not taken down):" \
      "removed when this node goes down"
  fi
  local k v
  for k in "${sysctls[@]}"; do
    if v="$(sysctl -n "$k" 2>/dev/null)"; then echo "$k=$v"; fi
  done >"$rn/sysctl.saved"
  touch "$rn/host.recorded"
}

# stop_started: after a failed up, stops what that up started (the daemons it started, in
# reverse order); when it started the node from nothing, takes the node apart (down).
stop_started() {
  ((${#started[@]})) || return 0
  log "up failed: stopping what it started (${started[*]})"
  if [[ " ${started[*]} " == *" containerd "* && " ${started[*]} " == *" kubelet "* ]]; then
    down || true
    return 0
  fi
  local i
  for ((i = ${#started[@]} - 1; i >= 0; i--)); do stop "${started[i]}" || true; done
}

# wait_until WHAT DAEMON CMD...: until CMD succeeds, DDP_NODE_WAIT seconds at most (180 by
# default) from this call: each wait is measured from its own start, never from before a build
# (`tools` may build for minutes on a cold machine). Fails at once if DAEMON exits.
wait_until() {
  local what=$1 daemon=$2 t0=$SECONDS; shift 2
  until "$@" >/dev/null 2>&1; do
    alive "$(<"$rn/$daemon.pid")" || die "$daemon exited: $rn/$daemon.log"
    ((SECONDS - t0 < ${DDP_NODE_WAIT:-180})) || die "$what in ${DDP_NODE_WAIT:-180}s: $rn/$daemon.log"
    sleep 0.5
  done
}

# start_kubelet: the kubelet, registered, with the node's address and none of the taints of a node
# not yet initialised.
start_kubelet() {
  daemon kubelet "$bin/kubelet" --config "$rn/kubelet/config.yaml" --kubeconfig "$node_kubeconfig" \
    --root-dir "$rn/kubelet/root" --cert-dir "$rn/kubelet/pki" \
    --hostname-override "$node" --cloud-provider external --node-labels ddp-operator.io/node=real
  wait_until "node $node did not register" kubelet kubectl_ get node "$node"
  # real-node-0's kubelet listens on 127.0.0.1 only, an address it refuses as its node IP
  # ("nodeIP can't be loopback address"): with --cloud-provider external it leaves the addresses
  # to a cloud controller, which this is. The apiserver reaches the kubelet (kubectl logs/exec)
  # at the first address of its preferred types, so InternalIP alone (a Hostname would come
  # first): 127.0.0.1, or real-node-1's end of its link.
  kubectl_ patch node "$node" --subresource=status --type=json \
    -p '[{"op": "replace", "path": "/status/addresses", "value": [{"type": "InternalIP", "address": "'"$kubelet_address"'"}]}]' \
    >/dev/null
  kubectl_ taint node "$node" node.cloudprovider.kubernetes.io/uninitialized- >/dev/null 2>&1 || true
  # Nodes registered before the fake nodes were tainted instead have this one.
  kubectl_ taint node "$node" ddp-operator.io/real-node- >/dev/null 2>&1 || true
}

start_kube_proxy() {
  daemon kube-proxy "$bin/kube-proxy" --config "$rn/kube-proxy.yaml"
  wait_until "kube-proxy is not healthy" kube-proxy "${ns[@]}" curl -fsS "http://127.0.0.1:$((port0 + 8))/healthz"
}

up() {
  [[ $(id -u) == 0 ]] || die "needs root"
  [[ -f "$kubeconfig" ]] || die "no cluster: run hack/cluster/cluster.sh up first"
  # What takes long on a cold machine (the node's binaries, the pause image) comes first: no
  # wait below counts it.
  tools
  pause_image
  local t0=$SECONDS
  kubectl_ get --raw /readyz >/dev/null || die "the cluster does not answer"
  if ((index > 0)); then
    alive "$(cat "$state/realnode/api-forward.pid" 2>/dev/null || echo 0)" ||
      die "real-node-0 first (realnode.sh up): $node reaches the API and DNS through it"
  fi
  mkdir -p "$rn"
  trap stop_started EXIT
  if ((index == 0)); then
    record_host
    # real-node-1's images: a clone of these, made while no containerd runs and this node's
    # holds no container (its state directory is gone with every down; after a crash it is
    # not, and a clone would give real-node-1 this node's sandboxes to tear down).
    local other
    other="$(cat "$state/realnode-1/containerd.pid" 2>/dev/null || echo 0)"
    if ((${DDP_REAL_NODES:-2} > 1)) && ! pid_of containerd >/dev/null && ! alive "$other" &&
      [[ ! -e "$rn/containerd/state" ]]; then
      clone_images "$images_root-1"
    fi
    fence_up
  else
    cgroup_root_up
    node_net_up
  fi
  write_configs
  make_bridge
  if ((index == 0)); then
    start_coredns
    start_api_forward
  fi
  start_containerd
  import "$pause_tar"
  start_kubelet
  start_kube_proxy
  start_netpol
  kubectl_ wait --for=condition=Ready "node/$node" --timeout=120s >/dev/null ||
    die "node $node is not Ready: $rn/kubelet.log"
  trap - EXIT
  log "node $node is Ready in $((SECONDS - t0))s (containerd $CONTAINERD_VERSION, logs in $rn)"
}

# resync: restarts the node's daemons that watch the API (the kubelet, CoreDNS on real-node-0,
# kube-proxy, netpol), those running, so that they list it now: after a control-plane outage their
# informers, backing off, catch up up to a minute later (CoreDNS answered a new Service's names
# NXDOMAIN for 40 s after the API server was back; a kubelet started a new pod 56 s after it was
# bound). Its containers run on meanwhile. cluster.sh start calls it, as it restarts kwok.
resync() {
  tools
  if pid_of kubelet >/dev/null; then
    stop kubelet
    start_kubelet
    kubectl_ wait --for=condition=Ready "node/$node" --timeout=120s >/dev/null ||
      die "node $node is not Ready: $rn/kubelet.log"
  fi
  if ((index == 0)) && pid_of coredns >/dev/null; then
    stop coredns
    start_coredns
  fi
  if pid_of kube-proxy >/dev/null; then
    stop kube-proxy
    start_kube_proxy
  fi
  if pid_of netpol >/dev/null; then
    stop netpol
    : >"$rn/netpol.log"
    start_netpol
  fi
}

status() {
  local p line="" programs=(containerd kubelet kube-proxy netpol)
  if ((index == 0)); then programs+=(coredns api-forward); fi
  for p in "${programs[@]}"; do
    if pid_of "$p" >/dev/null; then line+="$p: pid $(<"$rn/$p.pid"); "; else line+="$p: stopped; "; fi
  done
  echo "${line%; }"
  if [[ -f "$kubeconfig" ]]; then
    bin="$("$here/build.sh" real-node)"
    kubectl_ get node "$node" -o wide 2>/dev/null || true
  fi
}

case "${1:-}" in
  up | down | resync | netpol | kubelet | link) hold_lock "${index#0}" ;;
  # Images go into every node that runs.
  image | trainer | operator | foreign | load) hold_lock 1 ;;
esac
case "${1:-}" in
  up) up ;;
  down) down ;;
  image) provide base ;;
  trainer) shift; provide trainer "$@" ;;
  operator) provide operator ;;
  foreign)
    [[ $# == 2 ]] || { echo "usage: $0 foreign NAME (tests/images/NAME)" >&2; exit 2; }
    provide foreign "$2"
    ;;
  load)
    [[ $# == 4 ]] || { echo "usage: $0 load ARCHIVE IMAGE NAME" >&2; exit 2; }
    load "$2" "$3" "$4"
    ;;
  status) status ;;
  resync) resync ;;
  netpol)
    tools
    case "${2:-}" in
      stop) stop netpol ;;
      start) : >"$rn/netpol.log" && start_netpol ;;
      *) echo "usage: $0 netpol stop|start [NODE]" >&2; exit 2 ;;
    esac
    ;;
  kubelet)
    tools
    case "${2:-}" in
      stop) stop kubelet ;;
      start) up ;;
      *) echo "usage: $0 kubelet stop|start [NODE]" >&2; exit 2 ;;
    esac
    ;;
  link)
    ((index > 0)) || die "real-node-0 has no link of its own (it is the host)"
    [[ -e "$rn/netns" ]] || die "$node is not up"
    case "${2:-}" in
      cut) link_cut ;;
      heal) node_net_up ;;
      *) echo "usage: $0 link cut|heal NODE" >&2; exit 2 ;;
    esac
    ;;
  *)
    echo "usage: $0 up|down|status|resync [NODE]|image|trainer [NAME=VALUE]...|operator|foreign NAME|load ARCHIVE IMAGE NAME|netpol|kubelet stop|start [NODE]|link cut|heal NODE" >&2
    exit 2
    ;;
esac
