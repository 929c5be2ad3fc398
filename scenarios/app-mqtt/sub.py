"""A user's MQTT subscriber (paho-mqtt): prints one JSON line per message with its one-way latency.

Each line is {"t": <unix time>, "latency_ms": ..., "seq": n}; the publisher and subscriber run on one machine,
so their clocks agree.  Resubscribes on every (re)connect; ends with exit 0 on SIGTERM or SIGINT.
"""

import argparse
import json
import signal
import sys
import time

import paho.mqtt.client as mqtt

ap = argparse.ArgumentParser()
ap.add_argument("--broker", required=True)
ap.add_argument("--topic", default="app/telemetry")
args = ap.parse_args()


def on_connect(client, userdata, flags, reason_code, properties):
    client.subscribe(args.topic, qos=1)
    print("subscribed", file=sys.stderr, flush=True)


def on_message(client, userdata, msg):
    now = time.time()
    body = json.loads(msg.payload)
    print(json.dumps({"t": now, "latency_ms": (now - body["t_sent"]) * 1000.0, "seq": body["seq"]}), flush=True)


client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="cloud-sub")
client.on_connect = on_connect
client.on_message = on_message
client.reconnect_delay_set(min_delay=1, max_delay=2)
client.connect_async(args.broker, 1883, keepalive=10)
signal.signal(signal.SIGTERM, lambda *_: client.disconnect())
signal.signal(signal.SIGINT, lambda *_: client.disconnect())
client.loop_forever(retry_first_connection=True)
sys.exit(0)
