# shellcheck shell=bash
# shellcheck disable=SC2154 # the settings come from lib.sh, sourced first
# realnode.sh down (sourced after lib.sh): takes the node apart and leaves nothing of it on the
# machine: no process, mount, network namespace, bridge, cgroup, iptables chain or changed sysctl.

# Mount points under $1, deepest first.
mounts_under() {
  awk -v p="$1" '$5 == p || index($5, p "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r
}

# Processes in the pods' cgroups (kubelet's cgroupfs tree "kubepods" under the node's cgroup
# root, in the pids hierarchy).
pod_pids() {
  local pods="/sys/fs/cgroup/pids$cgroup_root/kubepods"
  [[ -d "$pods" ]] || return 0
  find "$pods" -name cgroup.procs -exec cat {} + 2>/dev/null
}

# What the node cost, before it goes: .cluster/<node>.cpu, "DAEMONS,PODS" CPU-seconds over its
# life (its containerd, kubelet, kube-proxy and engine; its pods' cgroup), which make test's
# report gives (hack/test.sh).
record_cpu() {
  local name pid ticks=0 pods=0 f
  for name in containerd kubelet kube-proxy netpol; do
    pid="$(pid_of "$name")" || continue
    read -r -a f <"/proc/$pid/stat" || continue
    ticks=$((ticks + f[13] + f[14]))
  done
  if [[ -r "/sys/fs/cgroup/cpuacct$cgroup_root/cpuacct.usage" ]]; then
    pods="$(<"/sys/fs/cgroup/cpuacct$cgroup_root/cpuacct.usage")"
  fi
  awk -v t="$ticks" -v hz="$(getconf CLK_TCK)" -v ns="$pods" \
    'BEGIN { printf "%.0f,%.0f\n", t / hz, ns / 1e9 }' >"$state/$node.cpu"
}

restore_sysctls() {
  [[ -f "$rn/sysctl.saved" ]] || return 0
  local line
  while read -r line; do
    [[ "$(sysctl -n "${line%%=*}" 2>/dev/null)" == "${line#*=}" ]] || sysctl -q -w "$line" || true
  done <"$rn/sysctl.saved"
  rm -f "$rn/sysctl.saved"
}

# The KUBE-* chains kubelet and kube-proxy made (up refuses a host whose own kubelet or
# kube-proxy keeps some): the rules of other chains that jump to them, then the chains.
remove_kube_chains() {
  local cmd table chain rule
  while read -r cmd table chain; do
    while read -r rule; do
      eval "$cmd -t $table ${rule/#-A/-D}" || true
    done < <("$cmd-save" -t "$table" | grep -E "^-A [^ ]+ .*-j $chain( |\$)" | grep -v '^-A KUBE-')
  done < <(kube_chains)
  while read -r cmd table chain; do "$cmd" -t "$table" -F "$chain" || true; done < <(kube_chains)
  while read -r cmd table chain; do "$cmd" -t "$table" -X "$chain" || true; done < <(kube_chains)
}

# What the kubelet did not stop (it was not running, or pods outlived the wait) goes through ctr:
# tasks killed and deleted (their shims exit with them), containers deleted. A containerd that
# died is started again for that: it finds its shims through its state directory.
remove_containers() {
  # (real-node-1's only while its namespace lives: after a restart of the machine's processes
  # the pin is an empty file, and nothing of the node runs.) A failed start is no reason to stop.
  if [[ -f "$rn/containerd/config.toml" ]] && ! pid_of containerd >/dev/null &&
    { ((index == 0)) || nsenter "--net=$rn/netns" true 2>/dev/null; }; then
    (start_containerd) ||
      log "containerd of $node did not start again: its containers go by the cgroup sweep"
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
  local pid t1=$SECONDS
  for pid in $(pgrep -f -- "containerd-shim-runc-v2 .*-address $sock" || true); do
    kill -KILL "$pid" 2>/dev/null || true
  done
  # The last resort: processes still in the pods' cgroups.
  while [[ -n "$(pod_pids)" ]]; do
    # shellcheck disable=SC2046 # one pid per word
    kill -KILL $(pod_pids) 2>/dev/null || true
    if ((SECONDS - t1 > 10)); then log "pod processes left: $(pod_pids | xargs)"; break; fi
    sleep 0.2
  done
}

# What kubelet and containerd put at fixed places of the host.
remove_host_files() {
  local d
  # Pod cgroups kubelet made (cgroupfs driver), deepest first, in every hierarchy.
  for d in /sys/fs/cgroup/*"$cgroup_root"/kubepods; do
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
  ((index == 0)) || return 0
  # The kubelet's device plugin socket has a fixed path (not under its root directory): both
  # kubelets make it, the last one started holds it (no device plugin is used).
  rm -f /var/lib/kubelet/device-plugins/kubelet.sock
  if [[ -e "$rn/no-var-lib-kubelet" ]]; then
    rmdir /var/lib/kubelet/device-plugins /var/lib/kubelet 2>/dev/null || true
  fi
  # Shim sockets have a fixed directory too; a shim that was killed leaves its socket.
  if [[ -e "$rn/no-run-containerd" ]]; then rm -rf /run/containerd; fi
}

down() {
  local t0=$SECONDS
  # real-node-1 goes first: it reaches the API through real-node-0.
  if ((index == 0)) && [[ -d "$state/realnode-1" ]]; then
    DDP_REALNODE_LOCKED=1 "$here/realnode.sh" down 1 || log "real-node-1's down failed"
  fi
  [[ -d "$rn" ]] || { log "no real node $node"; return 0; }
  tools
  local api=0
  if [[ -f "$kubeconfig" ]] && kubectl_ get --raw /readyz >/dev/null 2>&1; then api=1; fi
  # The kubelet stops the pods through CRI (containerd tears their network down with CNI DEL).
  if ((api)) && pid_of kubelet >/dev/null; then
    kubectl_ delete pods -A --field-selector "spec.nodeName=$node" --grace-period=1 \
      --wait=true --timeout=60s >/dev/null 2>&1 || log "pods of $node not all gone in 60s"
  fi
  if ((index > 0)); then record_cpu; fi
  stop netpol
  if ((index == 0)); then "$bin/netpol" -cleanup || log "netpol -cleanup failed"; fi
  stop kube-proxy
  stop kubelet
  stop coredns
  stop api-forward
  remove_containers
  # real-node-1's namespace: what still runs in it is killed before its pin is unmounted.
  if ((index > 0)); then node_net_down; fi
  local m
  while read -r m; do
    if [[ -n "$m" ]]; then umount -l "$m" 2>/dev/null || true; fi
  done < <(mounts_under "$rn")
  if ((index == 0)) && ip link show "$bridge" >/dev/null 2>&1; then ip link delete "$bridge"; fi
  remove_host_files
  if ((index == 0)); then
    remove_kube_chains
    fence_down
    restore_sysctls
  fi
  # Pods the kubelet could not stop are gone now: their objects go, then the Node.
  if ((api)); then
    kubectl_ delete pods -A --field-selector "spec.nodeName=$node" --force --grace-period=0 \
      >/dev/null 2>&1 || true
    kubectl_ delete node "$node" --ignore-not-found --wait=true >/dev/null 2>&1 || true
  fi
  rm -rf --one-file-system "$rn"
  log "$node is down in $((SECONDS - t0))s"
}
