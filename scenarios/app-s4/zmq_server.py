"""SEEDS S4's ZeroMQ server, as the seed wrote it: a REP socket that sends every request back unchanged.

    python3 zmq_server.py [--port 5555]

Prints "listening on tcp://*:PORT" once bound (roughnet's app-s4 scenario waits for that line) and
echoes until it is stopped (SIGTERM ends it).  roughnet runs it unchanged as a [[process]]
(scenarios/app-s4.toml, docs/applications.md).
"""

import argparse

import zmq

ap = argparse.ArgumentParser()
ap.add_argument("--port", type=int, default=5555)
args = ap.parse_args()

ctx = zmq.Context()
sock = ctx.socket(zmq.REP)
sock.bind(f"tcp://*:{args.port}")
print(f"listening on tcp://*:{args.port}", flush=True)
n = 0
while True:
    msg = sock.recv(copy=False)
    sock.send(msg, copy=False)
    n += 1
    if n % 100 == 0:
        print(f"echoed {n}", flush=True)
