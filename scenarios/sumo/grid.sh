#!/bin/sh
# Rebuild the 100-vehicle grid town of scenarios/v2v-fleet-100.toml with the eclipse-sumo wheel's tools
# (installed by `make`). The outputs are committed, so scenarios run without SUMO.
#   netgenerate: a 6 x 6 grid, 150 m blocks, two lanes a way --> grid.net.xml (750 m x 750 m)
#   randomTrips.py (seed 27, one trip per 0.2 s for 20 s, at least 500 m long) --> grid.rou.xml (101 vehicles)
#   roughnet mobility fcd (80 s, 1 s steps), then times shifted by -20 s --> grid.fcd.xml: at its time 0 every
#   vehicle has been inserted, and 100 of them stay on the grid until time 30 (a run's setup and 20 s of traffic)
set -eu
cd "$(dirname "$0")"
PY=${PY:-../../.venv/bin/python}
SUMO_HOME=$("$PY" -c 'import sumo; print(sumo.SUMO_HOME)')
export SUMO_HOME
"$SUMO_HOME/bin/netgenerate" --grid --grid.number 6 --grid.length 150 --default.lanenumber 2 \
    --no-turnarounds true --output-file grid.net.xml
trips=$(mktemp)
PATH="$SUMO_HOME/bin:$PATH" "$PY" "$SUMO_HOME/tools/randomTrips.py" -n grid.net.xml -r grid.rou.xml -o "$trips" \
    --seed 27 -b 0 -e 20 -p 0.2 --min-distance 500 --validate
rm -f "$trips"
raw=$(mktemp)
"$PY" -m roughnet.cli mobility fcd grid.net.xml grid.rou.xml --out "$raw" --end 80s --step 1s
"$PY" - "$raw" grid.fcd.xml <<'PYEOF'
import re, sys
src, dst = sys.argv[1], sys.argv[2]
out, keep = [], True
for line in open(src):
    m = re.search(r'<timestep time="([\d.]+)"', line)
    if m:  # a time step: kept (its time shifted) from SUMO's 20 s on, with its vehicles and its end tag
        t = float(m.group(1)) - 20.0
        keep = t >= 0
        line = line.replace(m.group(0), f'<timestep time="{t:.2f}"')
    elif "<vehicle" not in line and "</timestep>" not in line:
        out.append(line)  # the header and the closing tag
        continue
    if keep:
        out.append(line)
open(dst, "w").writelines(out)
PYEOF
rm -f "$raw"
