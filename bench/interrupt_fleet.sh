#!/bin/bash
# Ctrl-C (SIGINT) and SIGKILL during a 100-car run (scenarios/v2v-fleet-100.toml), each at the given seconds
# after the start: what is left (namespaces, agents, wires, nftables tables), and what `roughnet clean` removes.
#   bash bench/interrupt_fleet.sh "12 30"      (issue 27; docs/PERFORMANCE.md, "Interrupting a 100-car run")
cd "$(dirname "$0")/.."
left() {
  echo "  netns rn-: $(ip netns list 2>/dev/null | grep -c '^rn-')  agents: $(pgrep -c -x roughnet-agent)  wires: $(pgrep -c -x roughnet-wire)  nft tables rn: $(nft list tables 2>/dev/null | grep -c rn)"
}
echo "before:"; left
for sig in INT KILL; do
  for at in $1; do
    rm -rf /tmp/f100-int
    .venv/bin/roughnet run scenarios/v2v-fleet-100.toml --results /tmp/f100-int --no-report > /tmp/interrupt-fleet-$sig-$at.log 2>&1 &
    pid=$!
    sleep $at
    echo "SIG$sig at ${at}s (pid $pid):"; left
    kill -$sig $pid
    t0=$(date +%s.%N)
    wait $pid; rc=$?
    t1=$(date +%s.%N)
    echo "  exit $rc after $(echo "$t1 - $t0" | bc) s"; left
    .venv/bin/roughnet clean --dry-run 2>&1 | tail -3 | sed 's/^/  dry-run: /'
    /usr/bin/time -f "  clean took %e s" .venv/bin/roughnet clean 2>&1 | tail -3 | sed 's/^/  /'
    echo "  after clean:"; left
  done
done
