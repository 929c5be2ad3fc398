#!/usr/bin/env bash
# Installs the Debian packages roughnet's local Kubernetes cluster needs, only when some are
# missing (idempotent, fast when done). containerd and etcd are run by roughnet itself, inside
# network namespaces with their own configuration: installing them must not leave a daemon
# running in the root namespace. So the install runs with a policy-rc.d that forbids starting
# services (unless the machine already has one), and any containerd/etcd process that appears
# during the install is stopped again, by PID (processes that ran before are left alone).
set -euo pipefail
# strongswan-charon: the IKE daemon flanneld's ipsec backend starts (`--network flannel-ipsec`), with its VICI
# interface (strongswan-swanctl) and the AES-GCM and ECP ciphers flannel proposes (standard plugins); its package
# brings strongswan-starter, whose service must not run either. ipset: kube-router (`--network kube-router`) needs the
# command even with its network policy off.
PKGS=(containerd runc etcd-server etcd-client containernetworking-plugins busybox-static
      iptables conntrack socat openssl tini ipset strongswan-charon strongswan-swanctl libstrongswan-standard-plugins)
DAEMONS='^(containerd|etcd|charon|starter)$'
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-cluster-deps: missing Debian packages: ${missing[*]}; run as root (or apt-get install them)" >&2
  exit 1
fi

daemon_pids() {
  local d
  for d in /proc/[0-9]*; do
    [[ "$(cat "$d/comm" 2>/dev/null)" =~ $DAEMONS ]] && echo "${d#/proc/}"
  done
  return 0
}

before=" $(daemon_pids | tr '\n' ' ') "
policy=/usr/sbin/policy-rc.d
own_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\n# roughnet install-cluster-deps: no service starts during this install\nexit 101\n' > "$policy"
  chmod 0755 "$policy"
  own_policy=1
fi
cleanup() { [ "$own_policy" = 1 ] && rm -f "$policy"; return 0; }
trap cleanup EXIT

echo "install-cluster-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"

# Anything the install started anyway (a policy-rc.d that allows it, a socket activation, ...).
for pid in $(daemon_pids); do
  case "$before" in *" $pid "*) continue ;; esac
  echo "install-cluster-deps: the install started $(cat "/proc/$pid/comm" 2>/dev/null) (pid $pid): stopping it"
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 50); do [ -d "/proc/$pid" ] || break; sleep 0.1; done
  [ -d "/proc/$pid" ] && kill -KILL "$pid" 2>/dev/null || true
done
# Under systemd the units may have been enabled: keep them from starting at boot, but only
# those this install brought (a containerd or etcd the machine already ran is not ours).
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
  for unit in containerd etcd strongswan-starter; do
    pkg=$unit; [ "$unit" = etcd ] && pkg=etcd-server; [ "$unit" = strongswan-starter ] && pkg=strongswan-charon
    case " ${missing[*]} " in *" $pkg "*) ;; *) continue ;; esac
    if systemctl is-enabled --quiet "$unit" 2>/dev/null || systemctl is-active --quiet "$unit" 2>/dev/null; then
      echo "install-cluster-deps: disabling the $unit service the package enabled (roughnet runs its own)"
      systemctl disable --now "$unit" >/dev/null 2>&1 || true
    fi
  done
fi
