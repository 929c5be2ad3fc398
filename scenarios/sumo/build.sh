#!/bin/sh
# Rebuild roughnet's small SUMO network, its routes and their floating-car data with the eclipse-sumo
# wheel's tools (installed by `make`). The outputs are committed, so scenarios run without SUMO.
#   town.nod.xml + town.edg.xml --netconvert--> town.net.xml   (six intersections, a 1 km highway)
#   town.net.xml --randomTrips.py (seed 16, one trip per 1.25 s for 40 s)--> town.rou.xml (32 vehicles)
#   town.net.xml + town.rou.xml --roughnet mobility fcd (60 s, 1 s steps)--> town.fcd.xml
set -eu
cd "$(dirname "$0")"
PY=${PY:-../../.venv/bin/python}
SUMO_HOME=$("$PY" -c 'import sumo; print(sumo.SUMO_HOME)')
export SUMO_HOME
"$SUMO_HOME/bin/netconvert" --node-files town.nod.xml --edge-files town.edg.xml --output-file town.net.xml \
    --no-turnarounds true
trips=$(mktemp)
PATH="$SUMO_HOME/bin:$PATH" "$PY" "$SUMO_HOME/tools/randomTrips.py" -n town.net.xml -r town.rou.xml -o "$trips" \
    --seed 16 -b 0 -e 40 -p 1.25 --min-distance 300 --fringe-factor 10 --validate
rm -f "$trips"
"$PY" -m roughnet.cli mobility fcd town.net.xml town.rou.xml --out town.fcd.xml --end 60s --step 1s
