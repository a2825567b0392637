#!/usr/bin/env bash
# One real node beside the kwok nodes of the local cluster (hack/cluster/cluster.sh):
# `realnode.sh up|down|image|trainer|status`.
# up:     builds (or reuses) kubelet, containerd, ctr and the CNI plugins (build.sh real-node) and the
#         pause image, then starts containerd and a kubelet that registers node real-node-0
#         (label ddp-operator.io/node=real, taint ddp-operator.io/real-node:NoSchedule: only pods
#         that tolerate it land there) with the cluster of .cluster/kubeconfig. Pods get addresses
#         of 198.18.0.0/24 on the bridge ddp0 (a route to 198.18.0.0/15 only: no way off the host).
#         Cluster DNS: CoreDNS (build.sh real-node) on the bridge's address 198.18.0.1:53 only,
#         answering for cluster.local from the cluster's API and for nothing else (no forwarding);
#         the kubelet gives it to the pods (clusterDNS) and no host resolver (an empty resolvConf).
#         Everything lives in .cluster/realnode/ but what kubelet and containerd put at fixed
#         places (/var/log/containers, /run/containerd/s, /var/lib/cni/results,
#         /var/lib/kubelet/device-plugins/kubelet.sock, cgroups "kubepods", six sysctls), which
#         down undoes.
# down:   deletes the node's pods and the Node, stops kubelet and CoreDNS, kills and removes every container
#         (ctr), stops containerd, unmounts and removes .cluster/realnode/, deletes ddp0, the
#         kubepods cgroups and the kubelet's log links, and restores the sysctls kubelet changed.
# image:  builds (or reuses) the small Python image, image.sh's Debian Python 3.11 base (the
#         trainer image's base too), imports it when the node runs and prints its name.
# trainer [NAME=VALUE]...: builds (or reuses) the trainer image from trainer_image/Dockerfile
#         without Docker (hack/cluster/image.sh: buildah, a local Debian Python base; build
#         arguments passed on), imports it when the node runs and prints its name.
# status: says what runs.
# tests/test_realnode.py runs pods and DDP jobs on the node and checks that down leaves nothing.
# Needs root, runc (apt-get install runc), for image and trainer debootstrap, for trainer buildah
# (apt-get install buildah).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
state="$root/.cluster"
rn="$state/realnode"
kubeconfig="$state/kubeconfig"
cache="${DDP_CACHE_DIR:-$HOME/.cache/ddp-operator}"
node=real-node-0
bridge=ddp0
subnet=198.18.0.0/24
gateway=198.18.0.1
cluster_domain=cluster.local
# The cluster's ports are port0..port0+5 (cluster.sh, same formula); the kubelet takes the next two.
port0=$((20000 + 0x$(printf '%s' "$root" | sha256sum | cut -c9-16) % 1000 * 10))
kubelet_port=$((port0 + 6))
healthz_port=$((port0 + 7))
sock="$rn/containerd/containerd.sock"
# containerd's root (its images: content and unpacked snapshots) outlives the node, in the cache:
# a later node finds the trainer image there instead of importing it again (~2.5 min). What runs
# (tasks, mounts, sockets) is in its state directory under .cluster/realnode. One real node per
# machine: containerd locks this root.
# shellcheck source=hack/cluster/versions.env
source "$here/versions.env"
images_root="$cache/containerd-root-$CONTAINERD_VERSION"
sysctls=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes)

log() { echo "[realnode $(date +%H:%M:%S)] $*" >&2; }
die() { log "$*"; exit 1; }
kubectl_() { "$bin/kubectl" --kubeconfig "$kubeconfig" "$@"; }
ctr_() { "$bin/ctr" --address "$sock" --namespace k8s.io "$@"; }
alive() { [[ -e /proc/$1 && "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]]; }
pid_of() { [[ -f "$rn/$1.pid" ]] && alive "$(<"$rn/$1.pid")" && cat "$rn/$1.pid"; }

tools() {
  bin="$("$here/build.sh" real-node)"
  runc="$(command -v runc)" || die "runc is missing: apt-get install runc"
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

# image_tar NAME REF ROOTFS ARGS...: an OCI archive of ROOTFS as REF, cached as NAME.
image_tar() {
  local name=$1 ref=$2 rootfs=$3; shift 3
  local out="$cache/images/$name.tar"
  if [[ ! -f "$out" ]]; then
    mkdir -p "$cache/images"
    python3 "$here/ociimage.py" --name "$ref" --rootfs "$rootfs" "$@" "$out"
  fi
  echo "$out"
}

pause_image() {
  local key dir
  key="$(sha256sum "$bin/pause" | cut -c1-12)"
  pause_ref="ddp-operator.io/pause:$key"
  dir="$(mktemp -d)"
  install -m 0755 "$bin/pause" "$dir/pause"
  pause_tar="$(image_tar "pause-$key" "$pause_ref" "$dir" --entrypoint '["/pause"]')"
  rm -rf "$dir"
}


import() {
  ctr_ images import --snapshotter overlayfs "$1" >/dev/null 2>>"$rn/ctr.log" ||
    die "import of $1 failed: $rn/ctr.log"
}

write_configs() {
  mkdir -p "$rn/containerd" "$rn/cni/net.d" "$rn/kubelet" "$rn/pod-logs" "$rn/runc"
  cat >"$rn/containerd/config.toml" <<EOF
version = 3
root = "$images_root"
state = "$rn/containerd/state"
[grpc]
  address = "$sock"
[ttrpc]
  address = "$sock.ttrpc"
[plugins.'io.containerd.internal.v1.opt']
  path = "$rn/containerd/opt"
[plugins.'io.containerd.nri.v1.nri']
  disable = true
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "$pause_ref"
[plugins.'io.containerd.cri.v1.runtime']
  # Without CAP_SYS_RESOURCE runc cannot lower oom_score_adj below its own ("can't get final
  # child's PID from pipe: EOF"): keep containers at or above containerd's.
  restrict_oom_score_adj = true
  # Network namespaces under the state directory, not /run/netns.
  netns_mounts_under_state_dir = true
  cdi_spec_dirs = []
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
    BinaryName = "$runc"
    Root = "$rn/runc"
    SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["$bin"]
    conf_dir = "$rn/cni/net.d"
[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
EOF
  # A route to 198.18.0.0/15 through the bridge and no default route: a pod reaches the host and
  # the other pods, nothing else (ip_forward stays as it is; no masquerading).
  cat >"$rn/cni/net.d/10-ddp.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "ddp",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$bridge",
      "isGateway": true,
      "isDefaultGateway": false,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$rn/cni/ipam",
        "ranges": [[{"subnet": "$subnet"}]],
        "routes": [{"dst": "198.18.0.0/15"}]
      }
    }
  ]
}
EOF
  cat >"$rn/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $kubelet_port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $healthz_port
# The apiserver (kwokctl's) has no kubelet client certificate: anonymous and allowed, so that
# kubectl logs/exec work. Loopback only.
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
containerRuntimeEndpoint: unix://$sock
imageServiceEndpoint: unix://$sock
cgroupDriver: cgroupfs
failSwapOn: false
# Cluster DNS: CoreDNS on the bridge (start_coredns). No search domains or servers of the host:
# pods with dnsPolicy ClusterFirst see only the cluster's names, Default ones none.
clusterDNS:
- $gateway
clusterDomain: $cluster_domain
resolvConf: $rn/kubelet/resolv.conf
# This host mounts cgroup v1, which kubelet 1.35+ refuses unless told otherwise.
failCgroupV1: false
podLogsDir: $rn/pod-logs
registerWithTaints:
- key: ddp-operator.io/real-node
  effect: NoSchedule
serializeImagePulls: false
rotateCertificates: false
serverTLSBootstrap: false
evictionHard:
  memory.available: 100Mi
  nodefs.available: 5%
  imagefs.available: 5%
imageGCHighThresholdPercent: 95
imageGCLowThresholdPercent: 90
EOF
  echo "# No host resolver for the pods (kubelet resolvConf)." >"$rn/kubelet/resolv.conf"
  mkdir -p "$rn/coredns"
  # Only the cluster's zones: any other name is refused, nothing is forwarded. The kubernetes
  # plugin watches Services, EndpointSlices (and Pods, for pod-IP names) with the kubeconfig.
  cat >"$rn/coredns/Corefile" <<EOF
$cluster_domain:53 in-addr.arpa:53 ip6.arpa:53 {
    bind $gateway
    errors
    log
    kubernetes $cluster_domain in-addr.arpa ip6.arpa {
        kubeconfig $kubeconfig
        pods insecure
    }
}
EOF
}

# The bridge with its gateway address before the first pod (the CNI bridge plugin finds it and
# keeps it), for CoreDNS to listen on.
make_bridge() {
  if ! ip link show "$bridge" >/dev/null 2>&1; then
    ip link add "$bridge" type bridge
  fi
  if ! ip -4 addr show dev "$bridge" | grep -qF " $gateway/"; then
    ip addr add "$gateway/${subnet#*/}" dev "$bridge"
  fi
  ip link set "$bridge" up
}

start_coredns() {
  pid_of coredns >/dev/null && return 0
  local t0=$SECONDS
  setsid "$bin/coredns" -conf "$rn/coredns/Corefile" >>"$rn/coredns.log" 2>&1 </dev/null &
  echo $! >"$rn/coredns.pid"
  # It serves once its informers have synced with the API (or after 5 s without).
  until [[ -n "$(ss -Hlun "src $gateway:53")" ]]; do
    alive "$(<"$rn/coredns.pid")" || die "coredns exited: $rn/coredns.log"
    ((SECONDS - t0 < 60)) || die "coredns does not listen on $gateway:53 in 60s: $rn/coredns.log"
    sleep 0.2
  done
  log "coredns $("$bin/coredns" -version | head -n 1) on $gateway:53 ($rn/coredns.log)"
}

start_containerd() {
  pid_of containerd >/dev/null && return 0
  setsid "$bin/containerd" --config "$rn/containerd/config.toml" \
    >>"$rn/containerd.log" 2>&1 </dev/null &
  echo $! >"$rn/containerd.pid"
  until "$bin/ctr" --address "$sock" version >/dev/null 2>&1; do
    alive "$(<"$rn/containerd.pid")" || die "containerd exited: $rn/containerd.log"
    sleep 0.2
  done
  log "containerd $("$bin/containerd" --version | awk '{print $3}') runs ($rn/containerd.log)"
}

# Processes in the pods' cgroups (kubelet's cgroupfs tree "kubepods", in the pids hierarchy).
pod_pids() {
  [[ -d /sys/fs/cgroup/pids/kubepods ]] || return 0
  find /sys/fs/cgroup/pids/kubepods -name cgroup.procs -exec cat {} + 2>/dev/null
}

save_sysctls() {
  [[ -f "$rn/sysctl.saved" ]] && return 0
  local k
  for k in "${sysctls[@]}"; do echo "$k=$(sysctl -n "$k")"; done >"$rn/sysctl.saved"
}

restore_sysctls() {
  [[ -f "$rn/sysctl.saved" ]] || return 0
  local line
  while read -r line; do
    [[ "$(sysctl -n "${line%%=*}")" == "${line#*=}" ]] || sysctl -q -w "$line"
  done <"$rn/sysctl.saved"
  rm -f "$rn/sysctl.saved"
}

up() {
  local t0=$SECONDS
  [[ $(id -u) == 0 ]] || die "needs root"
  [[ -f "$kubeconfig" ]] || die "no cluster: run hack/cluster/cluster.sh up first"
  tools
  kubectl_ get --raw /readyz >/dev/null || die "the cluster does not answer"
  pause_image
  mkdir -p "$rn"
  # What of the host's fixed places was there before the first up, for down to leave as it was.
  if [[ ! -e "$rn/host.recorded" ]]; then
    [[ -d /run/containerd ]] || touch "$rn/no-run-containerd"
    [[ -d /var/log/containers ]] || touch "$rn/no-var-log-containers"
    [[ -d /var/lib/cni ]] || touch "$rn/no-var-lib-cni"
    [[ -d /var/lib/kubelet ]] || touch "$rn/no-var-lib-kubelet"
    touch "$rn/host.recorded"
  fi
  write_configs
  save_sysctls
  make_bridge
  start_coredns
  start_containerd
  import "$pause_tar"
  if ! pid_of kubelet >/dev/null; then
    setsid "$bin/kubelet" --config "$rn/kubelet/config.yaml" --kubeconfig "$kubeconfig" \
      --root-dir "$rn/kubelet/root" --cert-dir "$rn/kubelet/pki" \
      --hostname-override "$node" --cloud-provider external \
      --node-labels ddp-operator.io/node=real \
      >>"$rn/kubelet.log" 2>&1 </dev/null &
    echo $! >"$rn/kubelet.pid"
  fi
  until kubectl_ get node "$node" >/dev/null 2>&1; do
    alive "$(<"$rn/kubelet.pid")" || die "kubelet exited: $rn/kubelet.log"
    ((SECONDS - t0 < 180)) || die "node $node did not register in 180s: $rn/kubelet.log"
    sleep 0.5
  done
  # The kubelet listens on 127.0.0.1 only, an address it refuses as its node IP ("nodeIP can't be
  # loopback address"): with --cloud-provider external it leaves the addresses to a cloud
  # controller, which this is. The apiserver reaches the kubelet (kubectl logs/exec) at the first
  # address of its preferred types, so InternalIP 127.0.0.1 alone (a Hostname would come first).
  kubectl_ patch node "$node" --subresource=status --type=json \
    -p '[{"op": "replace", "path": "/status/addresses", "value": [{"type": "InternalIP", "address": "127.0.0.1"}]}]' \
    >/dev/null
  kubectl_ taint node "$node" node.cloudprovider.kubernetes.io/uninitialized- >/dev/null 2>&1 || true
  kubectl_ wait --for=condition=Ready "node/$node" --timeout=120s >/dev/null ||
    die "node $node is not Ready: $rn/kubelet.log"
  log "node $node is Ready in $((SECONDS - t0))s (kubelet $kubelet_port, logs in $rn)"
}

# Mount points under $1, deepest first.
mounts_under() {
  awk -v p="$1" '$5 == p || index($5, p "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r
}

down() {
  local t0=$SECONDS
  [[ -d "$rn" ]] || { log "no real node"; return 0; }
  tools
  local api=0
  if [[ -f "$kubeconfig" ]] && kubectl_ get --raw /readyz >/dev/null 2>&1; then api=1; fi
  # The kubelet stops the pods through CRI (containerd tears their network down with CNI DEL).
  if ((api)) && pid_of kubelet >/dev/null; then
    kubectl_ delete pods -A --field-selector "spec.nodeName=$node" --grace-period=1 \
      --wait=true --timeout=60s >/dev/null 2>&1 || log "pods of $node not all gone in 60s"
  fi
  stop kubelet
  stop coredns
  # What the kubelet did not stop (it was not running, or pods outlived the wait) goes through
  # ctr: tasks killed and deleted (their shims exit with them), containers deleted. A containerd
  # that died is started again for that: it finds its shims through its state directory.
  if [[ -f "$rn/containerd/config.toml" ]] && ! pid_of containerd >/dev/null; then
    start_containerd || true
  fi
  if pid_of containerd >/dev/null; then
    local id
    for id in $(ctr_ tasks list -q 2>/dev/null); do
      ctr_ tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
    done
    for id in $(ctr_ tasks list -q 2>/dev/null); do
      ctr_ tasks delete -f "$id" >/dev/null 2>&1 || true
    done
    for id in $(ctr_ containers list -q 2>/dev/null); do
      ctr_ containers delete "$id" >/dev/null 2>&1 || true
    done
  fi
  stop containerd
  # Shims of containers that containerd did not clean up (a crash): their parent is init and
  # their command line names our state directory.
  local pid
  for pid in $(pgrep -f -- "containerd-shim-runc-v2 .*-address $sock" || true); do
    kill -KILL "$pid" 2>/dev/null || true
  done
  # The last resort: processes still in the pods' cgroups.
  local t1=$SECONDS
  while [[ -n "$(pod_pids)" ]]; do
    # shellcheck disable=SC2046 # one pid per word
    kill -KILL $(pod_pids) 2>/dev/null || true
    if ((SECONDS - t1 > 10)); then log "pod processes left: $(pod_pids | xargs)"; break; fi
    sleep 0.2
  done
  local m
  while read -r m; do
    if [[ -n "$m" ]]; then umount -l "$m" 2>/dev/null || true; fi
  done < <(mounts_under "$rn")
  if ip link show "$bridge" >/dev/null 2>&1; then ip link delete "$bridge"; fi
  # Pod cgroups kubelet made (cgroupfs driver), deepest first, in every hierarchy.
  local d
  for d in /sys/fs/cgroup/*/kubepods; do
    if [[ -d "$d" ]]; then find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true; fi
  done
  if [[ -d /var/log/containers ]]; then
    find /var/log/containers -maxdepth 1 -type l -lname "$rn/*" -delete
    if [[ -e "$rn/no-var-log-containers" ]]; then rmdir /var/log/containers 2>/dev/null || true; fi
  fi
  # libcni's result cache (containerd gives no way to move it): our network's entries go with
  # CNI DEL; the directories go if they were not there before.
  if [[ -d /var/lib/cni/results ]]; then
    grep -lF -- "$rn/" /var/lib/cni/results/* 2>/dev/null | xargs -r rm -f || true
  fi
  if [[ -e "$rn/no-var-lib-cni" ]]; then
    rmdir /var/lib/cni/results /var/lib/cni 2>/dev/null || true
  fi
  # The kubelet's device plugin socket has a fixed path (not under its root directory).
  rm -f /var/lib/kubelet/device-plugins/kubelet.sock
  if [[ -e "$rn/no-var-lib-kubelet" ]]; then
    rmdir /var/lib/kubelet/device-plugins /var/lib/kubelet 2>/dev/null || true
  fi
  # Shim sockets have a fixed directory too; a shim that was killed leaves its socket.
  if [[ -e "$rn/no-run-containerd" ]]; then rm -rf /run/containerd; fi
  restore_sysctls
  # Pods the kubelet could not stop are gone now: their objects go, then the Node.
  if ((api)); then
    kubectl_ delete pods -A --field-selector "spec.nodeName=$node" --force --grace-period=0 \
      >/dev/null 2>&1 || true
    kubectl_ delete node "$node" --ignore-not-found --wait=true >/dev/null 2>&1 || true
  fi
  rm -rf --one-file-system "$rn"
  log "real node is down in $((SECONDS - t0))s"
}

# provide base|trainer [NAME=VALUE]...: the image image.sh builds (or reuses), imported into the
# running node unless it is there (its name carries its cache key); prints its name.
provide() {
  [[ $(id -u) == 0 ]] || die "needs root"
  tools
  local out t0=$SECONDS
  out="$("$here/image.sh" "$@")"
  if pid_of containerd >/dev/null && [[ -z "$(ctr_ images ls -q "name==${out#* }" 2>/dev/null)" ]]; then
    import "${out% *}"
    log "imported ${out#* } in $((SECONDS - t0))s"
  fi
  echo "${out#* }"
}

status() {
  local c=stopped k=stopped d=stopped
  pid_of containerd >/dev/null && c="running (pid $(<"$rn/containerd.pid"))"
  pid_of kubelet >/dev/null && k="running (pid $(<"$rn/kubelet.pid"))"
  pid_of coredns >/dev/null && d="running (pid $(<"$rn/coredns.pid"), $gateway:53)"
  echo "containerd: $c; kubelet: $k; coredns: $d"
  if [[ -f "$kubeconfig" ]]; then
    bin="$("$here/build.sh" real-node)"
    kubectl_ get node "$node" -o wide 2>/dev/null || true
  fi
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  image) provide base ;;
  trainer) shift; provide trainer "$@" ;;
  status) status ;;
  *) echo "usage: $0 up|down|image|trainer [NAME=VALUE]...|status" >&2; exit 2 ;;
esac
