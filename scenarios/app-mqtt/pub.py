"""A user's MQTT publisher (paho-mqtt), as an IoT gateway would be written: QoS 1, reconnects by itself.

Publishes {"seq": n, "t_sent": <unix time>} at --rate for --duration seconds, then waits until every
message is acknowledged (or --drain seconds pass) and exits 0.  roughnet's example app-mqtt runs it
unchanged as a [[process]] (docs/applications.md).
"""

import argparse
import json
import sys
import time

import paho.mqtt.client as mqtt

ap = argparse.ArgumentParser()
ap.add_argument("--broker", required=True)
ap.add_argument("--topic", default="app/telemetry")
ap.add_argument("--rate", type=float, default=10.0)
ap.add_argument("--duration", type=float, default=10.0)
ap.add_argument("--drain", type=float, default=10.0)
args = ap.parse_args()

client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="gateway-pub")
client.reconnect_delay_set(min_delay=1, max_delay=2)
client.max_queued_messages_set(0)
client.connect_async(args.broker, 1883, keepalive=10)
client.loop_start()
pending = []
start = time.monotonic()
n = 0
while time.monotonic() - start < args.duration:
    info = client.publish(args.topic, json.dumps({"seq": n, "t_sent": time.time()}), qos=1)
    pending.append(info)
    n += 1
    time.sleep(max(0.0, start + n / args.rate - time.monotonic()))


def state(info):
    """"acked", "waiting", or "failed" (paho refuses a publish made while the broker was away)."""
    try:
        return "acked" if info.is_published() else "waiting"
    except RuntimeError:
        return "failed"


deadline = time.monotonic() + args.drain
while time.monotonic() < deadline and any(state(i) == "waiting" for i in pending):
    time.sleep(0.05)
states = [state(i) for i in pending]
print(json.dumps({"t": time.time(), "published": n, "acked": states.count("acked"),
                  "refused_while_disconnected": states.count("failed")}), flush=True)
client.loop_stop()
client.disconnect()
sys.exit(0)
