# shellcheck shell=bash
# shellcheck disable=SC2154 # the settings come from lib.sh, sourced first
# What real-node-1 needs beyond real-node-0's steps (sourced by realnode.sh after lib.sh): its
# network namespace and link, its cgroup root, its clone of the images, and taking them apart;
# and the host's fence, which real-node-0 owns.

# The host's fence, up with real-node-0: nothing of the pod network leaves the machine. The CNI
# bridge plugin turns the host's IP forwarding on, and the host has a default route: without the
# fence a pod's packet to an address outside 198.18.0.0/15 (an unassigned Service address, the
# internet) or to an unused one inside it went out of the host's own interface with its pod
# source address. A rule drops the first, a blackhole route (less specific than every node's) the
# second. The rule is in the mangle table's FORWARD, which comes after Services' addresses are
# translated (so they still work) and before the filter table, where kube-proxy's and netpol's
# rules accept what they allow. (So a Service without endpoints, which kube-proxy rejects there,
# times out instead for real-node-0's pods.)
fence_up() {
  iptables -w -t mangle -N DDP-FENCE 2>/dev/null || true
  iptables -w -t mangle -F DDP-FENCE
  iptables -w -t mangle -A DDP-FENCE -s "$pod_net" ! -d "$pod_net" -j DROP
  iptables -w -t mangle -C FORWARD -j DDP-FENCE 2>/dev/null ||
    iptables -w -t mangle -I FORWARD -j DDP-FENCE
  ip route replace blackhole "$pod_net"
}

fence_down() {
  while iptables -w -t mangle -D FORWARD -j DDP-FENCE 2>/dev/null; do :; done
  iptables -w -t mangle -F DDP-FENCE 2>/dev/null || true
  iptables -w -t mangle -X DDP-FENCE 2>/dev/null || true
  ip route del blackhole "$pod_net" 2>/dev/null || true
}

# The node's network namespace, pinned by a bind mount at $rn/netns (no /run/netns entry), its
# link to the host, routes both ways, and its bridge. Every step may run again.
node_net_up() {
  local pin="$rn/netns"
  if ! { [[ -e "$pin" ]] && nsenter "--net=$pin" true 2>/dev/null; }; then
    touch "$pin"
    unshare "--net=$pin" true
  fi
  local host_if=ddp-h$index node_if=ddp-n$index
  # A pair whose node end never reached the namespace (an up stopped between the two) is made
  # again.
  if ip link show "$host_if" >/dev/null 2>&1 &&
    ! "${ns[@]}" ip link show "$node_if" >/dev/null 2>&1; then
    ip link del "$host_if"
  fi
  if ! ip link show "$host_if" >/dev/null 2>&1; then
    ip link add "$host_if" type veth peer name "$node_if"
    ip link set "$node_if" netns "$pin"
  fi
  ip addr replace "$host_address/30" dev "$host_if"
  ip link set "$host_if" up
  ip route replace "$subnet" via "$kubelet_address" dev "$host_if"
  "${ns[@]}" ip link set lo up
  "${ns[@]}" ip addr replace "$kubelet_address/30" dev "$node_if"
  "${ns[@]}" ip link set "$node_if" up
  # real-node-0's pods, CoreDNS and the API forwarder: over the link. No default route.
  "${ns[@]}" ip route replace "$pod_net" via "$host_address" dev "$node_if"
  "${ns[@]}" sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1
  # The kubelet serves anyone who reaches it (anonymous, AlwaysAllow): only the API server, from
  # the host's end of the link.
  "${ns[@]}" iptables -w -N DDP-NODE 2>/dev/null || true
  "${ns[@]}" iptables -w -F DDP-NODE
  "${ns[@]}" iptables -w -A DDP-NODE -p tcp --dport "$((port0 + 6))" ! -s "$host_address" -j DROP
  "${ns[@]}" iptables -w -C INPUT -j DDP-NODE 2>/dev/null ||
    "${ns[@]}" iptables -w -I INPUT -j DDP-NODE
  # The kubelet and kube-proxy reach the API server at the forwarder's address (its certificate
  # names it).
  local new
  new="$(mktemp "$node_kubeconfig.XXXXXX")"
  sed "s|server: https://127.0.0.1:|server: https://$cluster_dns:|" "$kubeconfig" >"$new"
  if cmp -s "$new" "$node_kubeconfig"; then rm -f "$new"; else mv -f "$new" "$node_kubeconfig"; fi
}

# link_cut: the node cut off: the host's end of its link down, which takes the host's route to
# its pods with it (their packets then fall into the fence's blackhole). Nothing passes either
# way; the node's daemons and containers run on. node_net_up heals it.
link_cut() {
  ip link set "ddp-h$index" down
}

# The node's cgroup root in every hierarchy (the kubelet refuses one that does not exist);
# cpuset's needs its parent's CPUs and memory nodes before a task can join it.
cgroup_root_up() {
  local d
  for d in /sys/fs/cgroup/*/; do
    [[ -d "$d" && ! -L "${d%/}" ]] || continue
    mkdir -p "$d${cgroup_root#/}"
  done
  if [[ -d "/sys/fs/cgroup/cpuset$cgroup_root" ]]; then
    cp /sys/fs/cgroup/cpuset/cpuset.cpus "/sys/fs/cgroup/cpuset$cgroup_root/cpuset.cpus"
    cp /sys/fs/cgroup/cpuset/cpuset.mems "/sys/fs/cgroup/cpuset$cgroup_root/cpuset.mems"
  fi
}

# clone_images ROOT: real-node-1's containerd root ROOT made again as a copy of real-node-0's that costs
# no space: every content blob and unpacked file hard-linked (both are only ever read: blobs are
# named by their digest, snapshots are overlay lower layers), the two bolt databases copied
# (bolt writes in place). Only while neither containerd runs and real-node-0's holds no
# container (realnode.sh up of real-node-0 from nothing calls it first): a few seconds, and
# real-node-1 then has every image real-node-0 has.
clone_images() {
  local from="$cache/containerd-root-$CONTAINERD_VERSION" to=$1 db
  [[ -d "$from" ]] || return 0
  rm -rf --one-file-system "$to.new"
  cp -al "$from" "$to.new"
  for db in io.containerd.metadata.v1.bolt/meta.db io.containerd.snapshotter.v1.overlayfs/metadata.db; do
    if [[ -f "$from/$db" ]]; then rm -f "$to.new/$db" && cp "$from/$db" "$to.new/$db"; fi
  done
  rm -rf "$to.new"/io.containerd.content.v1.content/ingest/* "$to.new"/tmpmounts/*
  rm -rf --one-file-system "$to"
  mv "$to.new" "$to"
}

# link_blobs: before an import into real-node-1, the blobs real-node-0 has that it lacks, hard-
# linked into its content store: containerd then records them without writing (its default
# content sharing), and only the unpack costs.
link_blobs() {
  local from="$cache/containerd-root-$CONTAINERD_VERSION/io.containerd.content.v1.content/blobs/sha256"
  local to="$images_root/io.containerd.content.v1.content/blobs/sha256" blob
  [[ -d "$from" ]] || return 0
  mkdir -p "$to"
  for blob in "$from"/*; do
    [[ -e "$to/${blob##*/}" ]] || ln "$blob" "$to/${blob##*/}" 2>/dev/null || true
  done
}

# Processes in the node's network namespace (what down kills last).
netns_pids() {
  local inode p
  [[ -e "$rn/netns" ]] || return 0
  inode="$(stat -L -c %i "$rn/netns" 2>/dev/null)" || return 0
  for p in /proc/[0-9]*; do
    [[ "$(stat -L -c %i "$p/ns/net" 2>/dev/null)" == "$inode" ]] && echo "${p#/proc/}"
  done
  return 0
}

# What down takes apart of real-node-1 after its daemons and containers: stray processes of its
# namespace, the namespace (with it the bridge, the pods' links, the node's end of the link and
# its iptables rules), the host's end and route, its cgroups.
node_net_down() {
  local pids t0=$SECONDS d
  while pids="$(netns_pids)" && [[ -n "$pids" ]]; do
    # shellcheck disable=SC2086 # one pid per word
    kill -KILL $pids 2>/dev/null || true
    if ((SECONDS - t0 > 10)); then log "processes left in $node's namespace: ${pids//$'\n'/ }"; break; fi
    sleep 0.2
  done
  ip link del "ddp-h$index" 2>/dev/null || true
  ip route del "$subnet" 2>/dev/null || true
  for d in /sys/fs/cgroup/*"$cgroup_root"; do
    if [[ -d "$d" ]]; then find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true; fi
  done
}
