#!/usr/bin/env bash
# Installs the Debian packages roughnet needs, only when some are missing (idempotent, fast when done).
set -euo pipefail
PKGS=(iproute2 nftables ethtool iperf3 sockperf tcpdump procps python3-venv
      build-essential cmake pkg-config libclang-dev libcurl4-openssl-dev libssl-dev libzmq3-dev libzstd-dev
      mosquitto mosquitto-clients nats-server cyclonedds-tools openjdk-17-jre-headless maven)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-system-deps: missing Debian packages: ${missing[*]}; run as root (or apt-get install them)" >&2
  exit 1
fi
echo "install-system-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
