"""SEEDS S4's ROS 2 server, as the seed wrote it: an rclpy node that publishes every message it receives
on /s4/ping back unchanged on /s4/pong (std_msgs/msg/UInt8MultiArray, ROS's default QoS: reliable,
keep last 10, volatile), the type and QoS of roughnet's own ROS 2 endpoint.

    python3 ros2_server.py [--topic /s4]

Prints "ready: echoing /s4/ping on /s4/pong" once its publisher and subscription exist (roughnet's
app-s4 scenario waits for that line) and echoes until it is stopped (SIGTERM or SIGINT: exits 0).
The middleware is what the environment says (RMW_IMPLEMENTATION, ROS_DOMAIN_ID, ROS_STATIC_PEERS,
FASTDDS_BUILTIN_TRANSPORTS): scenarios/app-s4.toml sets them.
"""

import argparse
import sys

import rclpy
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node
from std_msgs.msg import UInt8MultiArray

ap = argparse.ArgumentParser()
ap.add_argument("--topic", default="/s4")
args = ap.parse_args()

rclpy.init()
node = Node("s4_server")
pong = node.create_publisher(UInt8MultiArray, f"{args.topic}/pong", 10)
count = 0


def echo(msg: UInt8MultiArray) -> None:
    global count
    pong.publish(msg)
    count += 1
    if count % 100 == 0:
        print(f"echoed {count}", flush=True)


node.create_subscription(UInt8MultiArray, f"{args.topic}/ping", echo, 10)
print(f"ready: echoing {args.topic}/ping on {args.topic}/pong", flush=True)
try:
    rclpy.spin(node)
except (KeyboardInterrupt, ExternalShutdownException):  # rclpy's own SIGINT/SIGTERM handler ended the spin
    pass
print(f"stopped after {count} echoes", flush=True)
sys.exit(0)
