"""SEEDS S4's ROS 2 client, as the seed wrote it: an rclpy node that publishes --count messages of
--size bytes on /s4/ping, one every --interval ms, waits for each to come back on /s4/pong and writes
each round trip in ms, one number per line, to --out (std_msgs/msg/UInt8MultiArray, ROS's default
QoS: reliable, keep last 10, volatile).

    python3 ros2_client.py --server HOST --size "64 KiB" --count 200 --interval 25 --out rtt.txt

Before the first measured request it waits for the server: a volatile subscription drops what was
published before it matched, so the client sends probe messages (not counted) every 200 ms until
one comes back, which shows both directions matched.  A request leaves at its scheduled time
(start + i * interval) or, when the previous reply came later than that, as soon as it came.  The
round trip is perf_counter() from just before publish() to the reply's callback.  The first 8 bytes
carry the sequence number (probes count down from 2**64 - 1).  Exits 0 when every request got its
reply, 1 when one did not within --timeout seconds or the server never answered a probe.

Discovery: the server's address is given to the middleware by the environment (ROS_STATIC_PEERS,
set by scenarios/app-s4.toml), as a ROS 2 user does on a network without multicast; without it,
--server's address is used.
"""

import argparse
import array
import os
import re
import socket
import struct
import sys
import time

import rclpy
from rclpy.node import Node
from std_msgs.msg import UInt8MultiArray

UNITS = {"b": 1, "kb": 1000, "kib": 1024, "mb": 1000**2, "mib": 1024**2}
PROBE = 2**64 - 1


def size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).lower() not in UNITS | {"": 1}:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 1024, '1 KiB', '64 KiB')")
    return int(m.group(1)) * (UNITS.get(m.group(2).lower(), 1))


ap = argparse.ArgumentParser()
ap.add_argument("--server", help="the server's host: given to the middleware as ROS_STATIC_PEERS when the "
                "environment sets none")
ap.add_argument("--topic", default="/s4")
ap.add_argument("--size", type=size, default=1024)
ap.add_argument("--count", type=int, default=100)
ap.add_argument("--interval", type=float, default=25.0, help="ms between requests")
ap.add_argument("--timeout", type=float, default=10.0, help="s to wait for one reply")
ap.add_argument("--discovery", type=float, default=30.0, help="s to wait for the server's first echo")
ap.add_argument("--out", default="rtt.txt")
args = ap.parse_args()
if args.server and not os.environ.get("ROS_STATIC_PEERS"):
    os.environ["ROS_STATIC_PEERS"] = socket.gethostbyname(args.server)  # read by rclpy.init() below

rclpy.init()
node = Node("s4_client")
ping = node.create_publisher(UInt8MultiArray, f"{args.topic}/ping", 10)
got: dict[int, float] = {}


def on_pong(msg: UInt8MultiArray) -> None:
    t = time.perf_counter()
    got[struct.unpack_from("<Q", msg.data, 0)[0]] = t


node.create_subscription(UInt8MultiArray, f"{args.topic}/pong", on_pong, 10)
buf = array.array("B", bytes(max(8, args.size)))


def publish(seq: int) -> float:
    struct.pack_into("<Q", buf, 0, seq)
    msg = UInt8MultiArray()
    msg.data = buf  # an array.array('B') is taken as is (a list or bytes would be checked value by value)
    t0 = time.perf_counter()
    ping.publish(msg)
    return t0


def wait_for(seq: int, until: float) -> bool:
    while seq not in got and time.perf_counter() < until:
        rclpy.spin_once(node, timeout_sec=max(0.0, min(0.05, until - time.perf_counter())))
    return seq in got


# discovery: probes until one comes back
t_disc = time.perf_counter()
probe = PROBE
while True:
    publish(probe)
    if wait_for(probe, time.perf_counter() + 0.2) or any(k > 2**63 for k in got):
        break
    if time.perf_counter() - t_disc > args.discovery:
        print(f"the server never echoed a probe within {args.discovery} s", file=sys.stderr, flush=True)
        sys.exit(1)
    probe -= 1
print(f"server answered after {time.perf_counter() - t_disc:.2f} s ({PROBE - probe + 1} probes)", flush=True)

rtts = []
start = time.perf_counter()
with open(args.out, "w") as out:
    for i in range(args.count):
        time.sleep(max(0.0, start + i * args.interval / 1000 - time.perf_counter()))
        t0 = publish(i)
        if not wait_for(i, t0 + args.timeout):
            print(f"no reply to request {i} within {args.timeout} s", file=sys.stderr, flush=True)
            sys.exit(1)
        rtts.append((got.pop(i) - t0) * 1000)
        out.write(f"{rtts[-1]:.4f}\n")
rtts.sort()
print(f"done: {len(rtts)} round trips of {len(buf)} B, median {rtts[len(rtts) // 2]:.3f} ms", flush=True)
node.destroy_node()
rclpy.try_shutdown()
sys.exit(0)
