#!/usr/bin/env bash
# Installs the Debian packages roughnet needs, only when some are missing (idempotent, fast when done).
#
#   install-system-deps.sh          every package (make setup, make test): the drivers' C libraries and
#                                   build tools, the brokers, Java for Kafka, Chromium for the report's tests
#   install-system-deps.sh --demo   what the quick start needs (make demo: TCP and UDP, the minimal agent):
#                                   the network tools, the C toolchain cargo links with, python3-venv
#                                   (issue 31: a fresh Debian 12 downloads 262 MB for the whole set)
set -euo pipefail
DEMO_PKGS=(iproute2 iputils-ping nftables ethtool iperf3 sockperf tcpdump procps python3-venv build-essential pkg-config)
FULL_PKGS=(cmake libclang-dev libcurl4-openssl-dev libssl-dev libzmq3-dev libzstd-dev
           mosquitto mosquitto-clients nats-server cyclonedds-tools openjdk-17-jre-headless maven
           chromium)  # the tests open the HTML report in a headless browser (test_report_browser.py)
case "${1:-}" in
  --demo) PKGS=("${DEMO_PKGS[@]}") ;;
  "") PKGS=("${DEMO_PKGS[@]}" "${FULL_PKGS[@]}") ;;
  *) echo "install-system-deps: unknown argument ${1} (expected --demo or nothing)" >&2; exit 2 ;;
esac
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
