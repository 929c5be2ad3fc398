#!/bin/sh
# Round trips from the client's pod to the server's through the client pod's wire (busybox ping, as
# root: an ICMP socket needs CAP_NET_RAW), one JSON line per reply for roughnet's latency figures.
ping -c 20 -i 0.2 server | sed -n 's/.*seq=\([0-9]*\).*time=\([0-9.]*\) ms/{"seq": \1, "rtt_ms": \2}/p'
