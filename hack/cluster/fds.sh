# shellcheck shell=bash
# Sourced by the cluster scripts that start long-lived processes (realnode/lib.sh, daemon.sh,
# cluster.sh).

# close_inherited_fds: closes every open file of this shell but standard input, output and
# error (and bash's own script descriptor, 255), so that what it starts next holds none of its
# caller's: a daemon that inherits a lock file (`flock LOCK make demo`) holds the lock for its
# whole life.
close_inherited_fds() {
  local fd
  for fd in /proc/"$BASHPID"/fd/*; do
    fd="${fd##*/}"
    if ((fd > 2 && fd != 255)); then eval "exec $fd>&-" 2>/dev/null || true; fi
  done
}
