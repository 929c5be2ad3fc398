"""Engine choice and its preflight messages; tbf, fifo, nftables and netem settings: no root needed."""

from __future__ import annotations

import pytest

from roughnet.errors import LinkError, PreflightError
from roughnet.links import Capabilities, choose_engines, engine_for
from roughnet.links.kernel import (
    KernelEngine,
    chain_name,
    nft_ruleset,
    queue_limit_bytes,
    shaping_argv,
    tbf_burst,
)
from roughnet.links.netem import NetemEngine, netem_argv, netem_limit
from roughnet.runspec import Direction, Link

MBIT = 1_000_000
MS = 1_000_000


def caps(**kw) -> Capabilities:
    base = dict(root=True, netns=True, netem=False, tbf=True, htb=True, nft=True, wire=False,
                notes={"wire": "roughnet-wire is not built (run `make build`, or set $ROUGHNET_WIRE)"})
    base.update(kw)
    return Capabilities(**base)


def link(engine="auto", index=0, hosts=("car1", "car2"), **fwd) -> Link:
    return Link(index=index, hosts=hosts, engine=engine, forward=Direction(**fwd))


def test_auto_picks_kernel_for_rate_and_loss_without_netem():
    links = [link(rate_bps=10 * MBIT, loss=0.1), link(index=1), link(index=2, queue_packets=10)]
    assert choose_engines(links, caps()) == {0: "kernel", 1: "kernel", 2: "kernel"}


def test_auto_prefers_netem_where_the_kernel_has_it():
    assert choose_engines([link(rate_bps=MBIT), link(index=1, delay_ns=MS)], caps(netem=True)) == {
        0: "netem", 1: "netem"}


def test_auto_falls_to_wire_for_delay_when_wire_is_built():
    assert choose_engines([link(delay_ns=10 * MS, jitter_ns=MS), link(index=1, rate_bps=MBIT)],
                          caps(wire=True)) == {0: "wire", 1: "kernel"}


def test_delay_without_netem_or_wire_fails_naming_link_capability_and_remedy():
    with pytest.raises(PreflightError) as e:
        choose_engines([link(rate_bps=MBIT), link(index=1, hosts=("a", "b"), delay_ns=10 * MS)], caps())
    msg = str(e.value)
    assert "link 1 (a <-> b)" in msg
    assert "needs delay" in msg
    assert "no sch_netem" in msg
    assert "kernel cannot do delay" in msg
    assert "roughnet-wire is not built" in msg
    assert 'engine = "wire" once roughnet-wire is built' in msg


def test_explicit_engine_that_cannot_do_it_fails():
    with pytest.raises(PreflightError, match=r'asks for engine "kernel" .* kernel cannot do jitter'):
        choose_engines([link(engine="kernel", jitter_ns=MS)], caps())
    with pytest.raises(PreflightError, match=r'asks for engine "netem" .*no sch_netem'):
        choose_engines([link(engine="netem", loss=0.1)], caps())
    with pytest.raises(PreflightError, match=r'asks for engine "wire" .*not built'):
        choose_engines([link(engine="wire")], caps())
    with pytest.raises(PreflightError, match="unknown engine 'fast'"):
        choose_engines([link(engine="fast")], caps())


def test_kernel_without_nftables_cannot_lose_but_can_shape():
    c = caps(nft=False)
    assert choose_engines([link(rate_bps=MBIT)], c) == {0: "kernel"}
    with pytest.raises(PreflightError, match="nftables netdev ingress is unavailable"):
        choose_engines([link(loss=0.05)], c)


def test_choose_engines_takes_a_run(make_run):
    run = make_run(["a", "b"], [Link(index=0, hosts=("a", "b"), reverse=Direction(loss=0.2))])
    assert choose_engines(run, caps()) == {0: "kernel"}


def test_engine_for():
    assert isinstance(engine_for("kernel"), KernelEngine)
    assert isinstance(engine_for("netem"), NetemEngine)
    with pytest.raises(LinkError, match="unknown link engine 'auto'"):
        engine_for("auto")


def test_tbf_burst_and_limit_follow_the_documented_rule():
    # burst = max(rate/8/HZ, 2 frames), HZ = 250, frame = MTU + 14
    assert tbf_burst(10 * MBIT, 1500) == 5000
    assert tbf_burst(1 * MBIT, 1500) == 3028
    assert tbf_burst(1000 * MBIT, 1500) == 500_000
    assert tbf_burst(1 * MBIT, 9000) == 18028
    # default limit: 50 ms at the rate, at least 10 frames
    assert queue_limit_bytes(Direction(rate_bps=10 * MBIT), 1500) == 62_500
    assert queue_limit_bytes(Direction(rate_bps=MBIT), 1500) == 15_140
    assert queue_limit_bytes(Direction(rate_bps=MBIT, queue_packets=20), 1500) == 30_280
    assert queue_limit_bytes(Direction(rate_bps=MBIT, queue_bytes=9000), 1500) == 9000
    assert queue_limit_bytes(Direction(rate_bps=MBIT, queue_bytes=90_000, queue_packets=20), 1500) == 30_280


def test_shaping_argv():
    assert shaping_argv("rn-x-a", "rn0-b", Direction(rate_bps=10 * MBIT), 1500) == [
        "tc", "-n", "rn-x-a", "qdisc", "replace", "dev", "rn0-b", "root",
        "tbf", "rate", "10000000bit", "burst", "5000", "limit", "62500"]
    assert shaping_argv("n", "i", Direction(queue_packets=7), 1500)[-3:] == ["pfifo", "limit", "7"]
    assert shaping_argv("n", "i", Direction(queue_bytes=7000), 1500)[-3:] == ["bfifo", "limit", "7000"]
    assert shaping_argv("n", "i", Direction(loss=0.5), 1500) is None
    assert shaping_argv("n", "i", Direction(), 1500) is None
    with pytest.raises(LinkError, match="positive"):
        shaping_argv("n", "i", Direction(rate_bps=0), 1500)


def test_nft_ruleset_drops_at_ingress_with_a_per_million_threshold():
    text = nft_ruleset("rn3", [(chain_name("forward", "rn3-b"), "rn3-b", 0.1),
                               (chain_name("reverse", "rn3p1"), "rn3p1", 1.0)])
    assert text.startswith("table netdev rn3 {")
    assert "chain forward_rn3_b {" in text
    assert 'type filter hook ingress device "rn3-b" priority -500; policy accept;' in text
    assert 'numgen random mod 1000000 < 100000 counter drop comment "loss"' in text
    # 100 %: every frame, no numgen draw (`< 1000000` is outside numgen's 0-999999 and nft refuses it)
    assert '    counter drop comment "loss"' in text and "< 1000000 counter" not in text
    assert text.count('counter comment "seen"') == 2
    assert nft_ruleset("t", [("c", "d", 0.000001)]).count("< 1 counter drop") == 1
    with pytest.raises(LinkError, match=r"\[0, 1\]"):
        nft_ruleset("t", [("c", "d", 1.5)])


def test_netem_argv():
    d = Direction(rate_bps=MBIT, delay_ns=10 * MS, jitter_ns=1_500_000, loss=0.05)
    argv = netem_argv("rn-x-a", "rn0-b", d, 1500)
    assert argv[:9] == ["tc", "-n", "rn-x-a", "qdisc", "replace", "dev", "rn0-b", "root", "netem"]
    tail = argv[9:]
    assert tail[:2] == ["limit", str(netem_limit(d, 1500))]
    assert tail[2:] == ["delay", "10000us", "1500us", "loss", "random", "5%", "rate", "1000000bit"]
    assert netem_argv("n", "i", Direction(), 1500) is None
    assert netem_argv("n", "i", Direction(loss=0.001), 1500)[-3:] == ["loss", "random", "0.1%"]
    assert "delay" not in netem_argv("n", "i", Direction(rate_bps=MBIT), 1500)


def test_netem_limit_covers_queue_and_packets_in_flight():
    # 1 Mbit/s, 100 ms delay: 100000 bits = 12500 B ~ 9 frames in flight; queue 20 packets
    assert netem_limit(Direction(rate_bps=MBIT, delay_ns=100 * MS, queue_packets=20), 1500) == 29
    assert netem_limit(Direction(rate_bps=MBIT), 1500) == 1000  # never below netem's default
    # no rate: sized for 10 Gbit/s of line rate during 50 ms of delay
    assert netem_limit(Direction(delay_ns=50 * MS), 1500) > 40_000
