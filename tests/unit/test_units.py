"""roughnet.units: every unit, case and spacing variants, bad inputs, format round trips."""

from __future__ import annotations

import pytest

from roughnet import units


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("0 ms", 0),
        ("1 ns", 1),
        ("250 us", 250_000),
        ("250 µs", 250_000),  # micro sign
        ("250 μs", 250_000),  # greek mu
        ("10 ms", 10_000_000),
        ("10ms", 10_000_000),
        ("  10   ms ", 10_000_000),
        ("10 MS", 10_000_000),
        ("1.1 ms", 1_100_000),
        ("1.5 s", 1_500_000_000),
        ("2 min", 120_000_000_000),
        ("1e3 us", 1_000_000),
        (".5 s", 500_000_000),
    ],
)
def test_duration(text: str, ns: int) -> None:
    assert units.parse_duration_ns(text) == ns


@pytest.mark.parametrize(
    ("text", "bps"),
    [
        ("1 bit/s", 1),
        ("10 kbit/s", 10_000),
        ("10 Kbit/s", 10_000),
        ("10 Mbit/s", 10_000_000),
        ("10 mbit/s", 10_000_000),
        ("10 MBIT/S", 10_000_000),
        ("1 Gbit/s", 1_000_000_000),
        ("1.5 Gbit/s", 1_500_000_000),
        ("100 bps", 100),
        ("64 kbps", 64_000),
        ("27 Mbps", 27_000_000),
        ("1 Gbps", 1_000_000_000),
        ("10 Mb/s", 10_000_000),
        ("1 B/s", 8),
        ("1 kB/s", 8_000),
        ("1 KB/s", 8_000),
        ("1 MB/s", 8_000_000),
        ("1 GB/s", 8_000_000_000),
        ("1 MiB/s", 8 * 1024 * 1024),
        ("1 MBps", 8_000_000),
        ("10Mbit/s", 10_000_000),
    ],
)
def test_rate(text: str, bps: int) -> None:
    assert units.parse_rate_bps(text) == bps


@pytest.mark.parametrize(
    ("text", "n"),
    [
        ("32 B", 32),
        ("1500 B", 1500),
        ("1 kB", 1000),
        ("1 KB", 1000),
        ("1 MB", 1_000_000),
        ("1 GB", 1_000_000_000),
        ("1 KiB", 1024),
        ("64 KiB", 65536),
        ("1 MiB", 1024**2),
        ("1 GiB", 1024**3),
        ("1.5 KiB", 1536),
        ("100 bytes", 100),
        ("64KiB", 65536),
    ],
)
def test_size(text: str, n: int) -> None:
    assert units.parse_size_bytes(text) == n


@pytest.mark.parametrize(("text", "f"), [("0%", 0.0), ("5%", 0.05), ("5 %", 0.05), ("0.1%", 0.001), ("100%", 1.0)])
def test_fraction(text: str, f: float) -> None:
    assert units.parse_fraction(text) == pytest.approx(f, rel=1e-12)


@pytest.mark.parametrize(
    ("text", "rate"),
    [("200 msg/s", 200.0), ("0.5 msg/s", 0.5), ("10 msgs/s", 10.0), ("max", None), ("MAX", None), (" max ", None)],
)
def test_msg_rate(text: str, rate: float | None) -> None:
    assert units.parse_msg_rate(text) == rate


@pytest.mark.parametrize(("text", "n"), [("100 packets", 100), ("1 packet", 1), ("50 pkts", 50), ("7 PACKETS", 7)])
def test_packets(text: str, n: int) -> None:
    assert units.parse_packets(text) == n


@pytest.mark.parametrize(
    ("parser", "value", "words"),
    [
        (units.parse_duration_ns, "10", ["missing unit", "duration like '10 ms'"]),
        (units.parse_duration_ns, 10, ["missing unit", "duration like '10 ms'"]),
        (units.parse_duration_ns, 1.5, ["missing unit"]),
        (units.parse_duration_ns, True, ["wrong type"]),
        (units.parse_duration_ns, "10 parsecs", ["unknown duration unit 'parsecs'"]),
        (units.parse_duration_ns, "-1 ms", ["negative duration"]),
        (units.parse_duration_ns, "ten ms", ["not a number"]),
        (units.parse_duration_ns, "", ["not a number"]),
        (units.parse_rate_bps, "10", ["missing unit", "rate like '10 Mbit/s'"]),
        (units.parse_rate_bps, "-10 Mbit/s", ["negative rate"]),
        (units.parse_rate_bps, "0 Mbit/s", ["above 0"]),
        (units.parse_rate_bps, "10 Mbit", ["unknown rate unit 'Mbit'"]),
        (units.parse_rate_bps, "10 furlongs/s", ["unknown rate unit"]),
        (units.parse_size_bytes, "64", ["missing unit", "size like '64 KiB'"]),
        (units.parse_size_bytes, "64 kb", ["'b' is a bit"]),
        (units.parse_size_bytes, "64 kib", ["'b' is a bit"]),
        (units.parse_size_bytes, "0.5 B", ["whole number"]),
        (units.parse_size_bytes, "-1 KiB", ["negative size"]),
        (units.parse_fraction, "5", ["missing unit", "percentage"]),
        (units.parse_fraction, 0.05, ["missing unit"]),
        (units.parse_fraction, "150%", ["above 100%"]),
        (units.parse_fraction, "-1%", ["negative percentage"]),
        (units.parse_fraction, "5 ms", ["unknown unit 'ms'"]),
        (units.parse_msg_rate, "200", ["missing unit", "'200 msg/s' or 'max'"]),
        (units.parse_msg_rate, "0 msg/s", ["above 0"]),
        (units.parse_msg_rate, "200 Hz", ["unknown message rate unit"]),
        (units.parse_packets, "100", ["missing unit", "'100 packets'"]),
        (units.parse_packets, "0 packets", ["at least 1"]),
        (units.parse_packets, "1.5 packets", ["whole number"]),
    ],
)
def test_bad_inputs_say_what_was_expected(parser, value, words: list[str]) -> None:
    with pytest.raises(ValueError) as info:
        parser(value)
    message = str(info.value)
    assert "expected" in message
    for word in words:
        assert word in message


@pytest.mark.parametrize("ns", [0, 1, 999, 1000, 1_500_000, 10_000_000, 1_234_567_891, 60_000_000_000, 90_000_000_000])
def test_duration_format_round_trip(ns: int) -> None:
    assert units.parse_duration_ns(units.format_duration_ns(ns)) == ns


@pytest.mark.parametrize("bps", [1, 1000, 9_550_000, 10_000_000, 27_000_000, 1_000_000_000, 123_456_789])
def test_rate_format_round_trip(bps: int) -> None:
    assert units.parse_rate_bps(units.format_rate_bps(bps)) == bps


@pytest.mark.parametrize("n", [0, 32, 1500, 1024, 1536, 10_000, 65536, 1024**2, 3 * 1024**2 + 512, 10**9])
def test_size_format_round_trip(n: int) -> None:
    assert units.parse_size_bytes(units.format_size_bytes(n)) == n


def test_formats_read_well() -> None:
    assert units.format_duration_ns(10_000_000) == "10 ms"
    assert units.format_duration_ns(120_000_000_000) == "2 min"
    assert units.format_rate_bps(10_000_000) == "10 Mbit/s"
    assert units.format_size_bytes(65536) == "64 KiB"
    assert units.format_size_bytes(1500) == "1500 B"
    assert units.format_fraction(0.05) == "5%"
    assert units.parse_fraction(units.format_fraction(0.001)) == pytest.approx(0.001)
    assert units.format_msg_rate(200.0) == "200 msg/s"
    assert units.format_msg_rate(None) == "max"
    assert units.parse_msg_rate(units.format_msg_rate(0.5)) == 0.5
    assert units.format_packets(100) == "100 packets"
    assert units.parse_packets(units.format_packets(1)) == 1
