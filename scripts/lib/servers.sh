# Shared by the scripts that start throwaway servers on loopback (pg-cluster, pg-ha,
# patroni, rabbitmq). Sourced, not run.

# Runs a command as USER when we are root: PostgreSQL (and Patroni, which starts it)
# refuse to run as root, and CI runs as root. From /, not the caller's directory: a
# clone in a directory USER cannot enter (root's home, a 0700 temporary directory)
# must not matter, and Patroni's children chdir to where they were started.
#   as_user postgres pg_ctl -D "$dir" start
as_user() {
  local user=$1
  shift
  if [[ $(id -u) -eq 0 ]]; then (cd / && runuser -u "$user" -- "$@"); else "$@"; fi
}

# A free loopback port below the kernel's ephemeral range (a port there can be taken at
# any moment as the local end of some outgoing connection: nothing listens, yet bind()
# fails), and not one of the ports given (already picked for the same server).
#   port=$(free_port); other=$(free_port "$port")
free_port() {
  local port low span
  low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
  span=$((low > 22000 ? low - 20000 : 10000))
  for _ in $(seq 1 200); do
    port=$((20000 + RANDOM % span))
    [[ " $* " == *" $port "* ]] && continue
    if ! (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null; then echo "$port"; return; fi
  done
  echo "${0##*/}: no free port found" >&2
  exit 1
}

# Waits up to SECONDS for a command to succeed.
#   wait_until 30 pg_isready -h 127.0.0.1 -p "$port"
wait_until() {
  local seconds=$1
  shift
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || return 1
    sleep 0.2
  done
}
