"""A user program's own numbers (roughnet.apps.appmetrics): files, distributions, series, Prometheus."""

from __future__ import annotations

import json
import math
import random
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hdrh.histogram import HdrHistogram

from roughnet.apps import appmetrics as am
from roughnet.errors import RoughnetError, SpecError

T0 = 1_700_000_000.0


# --- JSON lines ---

def test_json_lines_timed_untimed_junk_and_bools(tmp_path):
    p = tmp_path / "out.jsonl"
    p.write_text("\n".join([
        "starting up",                                             # 1: junk
        json.dumps({"t": T0 + 0.5, "lat": 1.25, "n": 3, "ok": True, "name": "x", "nested": {"a": 1}}),
        "",                                                        # 3: blank, not counted
        json.dumps({"lat": 2, "flag": False}),                     # 4: untimed
        "[1, 2, 3]",                                               # 5: JSON, not an object
        json.dumps({"t": T0 + 1, "msg": "no numbers"}),            # 6: nothing numeric
        json.dumps({"t": "yesterday", "lat": 3.5}),                # 7: t not a number -> untimed
        '{"t": 1700000002.0, "lat": NaN, "q": Infinity, "r": 7}',  # 8: non-finite values dropped
        '{"broken": ',                                             # 9: junk
    ]) + "\n")
    jl = am.read_json_lines(p)
    assert jl.rows == [
        (T0 + 0.5, {"lat": 1.25, "n": 3.0}),
        (None, {"lat": 2.0}),
        (None, {"lat": 3.5}),
        (T0 + 2.0, {"r": 7.0}),
    ]
    assert (jl.ignored, jl.first_ignored_line, jl.truncated) == (4, 1, False)
    assert am.latency_from_json(jl, "lat", "ms") == [1_250_000, 2_000_000, 3_500_000]
    assert am.latency_from_json(jl, "lat", "us") == [1_250, 2_000, 3_500]
    assert am.latency_from_json(jl, "lat", "s") == [1_250_000_000, 2_000_000_000, 3_500_000_000]
    assert am.latency_from_json(jl, "lat", "ns") == [1, 2, 4]  # rounded to whole ns (2.5 -> 2, 3.5 -> 4)


def test_json_lines_truncated_at_max_bytes_keeps_whole_lines(tmp_path):
    p = tmp_path / "out.jsonl"
    line = json.dumps({"t": T0, "v": 1}) + "\n"
    p.write_text(line * 10)
    jl = am.read_json_lines(p, max_bytes=len(line) * 3 + 5)
    assert len(jl.rows) == 3 and jl.truncated and jl.ignored == 0


def test_json_lines_missing_file_is_a_roughnet_error(tmp_path):
    with pytest.raises(RoughnetError, match="nope.jsonl"):
        am.read_json_lines(tmp_path / "nope.jsonl")


def test_unknown_unit_is_a_spec_error(tmp_path):
    with pytest.raises(SpecError, match="'min'.*ns, us, ms, s"):
        am.latency_from_json(am.JsonLines([], 0, None), "lat", "min")


# --- samples files ---

def test_samples_with_comments_blanks_and_malformed_lines(tmp_path):
    p = tmp_path / "rtt.txt"
    p.write_text("# rtt in ms\n0.25\n\n  1.5  \n1,2.0\n3 4\nabc\n2\n-0.5\nnan\ninf\n1e-3\n")
    s = am.read_samples(p, "ms")
    assert s.values_ns == [250_000, 1_500_000, 2_000_000, -500_000, 1_000]
    assert (s.malformed, s.first_malformed_line) == (5, 5)
    clean = tmp_path / "clean.txt"
    clean.write_text("10\n20\n")
    assert am.read_samples(clean, "us") == am.Samples([10_000, 20_000], 0, None)


# --- distributions ---

def _nearest_rank(sorted_vals, q):
    return sorted_vals[max(1, round(q * len(sorted_vals))) - 1]


def test_distribution_matches_exact_percentiles_within_hdr_precision():
    rng = random.Random(7)
    values = [int(rng.lognormvariate(math.log(2_000_000), 1.0)) + 500 for _ in range(10_000)]
    d = am.distribution(values)
    s = sorted(values)
    assert d["count"] == 10_000
    # Tolerance: the summary figures come from a histogram at 1 ns resolution with 3 significant
    # digits: each value shares a bucket at most v/1024 wide (2048 sub-buckets per power of two),
    # and a percentile reads back the bucket's highest equivalent value, so it is >= the exact
    # value and at most v/1024 above it; the us figure is then rounded to 0.001 us (+-0.0005).
    # 10 000 values make q*N an integer for every q below, so the rank conventions (HdrHistogram
    # rounds q*N, nearest-rank takes its ceiling) pick the same sample.
    for q, key in ((0.5, "p50_us"), (0.9, "p90_us"), (0.99, "p99_us"), (0.999, "p999_us")):
        exact = _nearest_rank(s, q) / 1e3
        assert exact - 0.0005 <= d[key] <= exact * (1 + 1 / 1024) + 0.0005, key
    assert s[0] / 1e3 * (1 - 1 / 1024) - 0.0005 <= d["min_us"] <= s[0] / 1e3 + 0.0005
    assert s[-1] / 1e3 - 0.0005 <= d["max_us"] <= s[-1] / 1e3 * (1 + 1 / 1024) + 0.0005
    mean = sum(s) / len(s)
    std = math.sqrt(sum((v - mean) ** 2 for v in s) / len(s))
    assert d["mean_us"] == pytest.approx(mean / 1e3, rel=1e-3)  # bucket midpoints: within half a bucket
    assert d["std_us"] == pytest.approx(std / 1e3, rel=1e-3)
    assert "clamped" not in d


def test_distribution_hdr_round_trips_through_hdrh_in_ns():
    values = [5_000, 20_000, 1_000_000, 1_000_000, 250_000_000]
    d = am.distribution(values)
    h = HdrHistogram.decode(d["hdr"])
    assert h.get_total_count() == 5
    # The contract histogram (lowest discernible 1000 ns, as the agent's) resolves 512 ns below
    # about 1 ms and v/1024 above.
    for v in values:
        assert h.values_are_equivalent(h.get_value_at_percentile(100 * (values.index(v) + 1) / 5), v)
    assert h.get_max_value() == pytest.approx(250_000_000, rel=1 / 1024)
    assert (h.lowest_trackable_value, h.highest_trackable_value, h.significant_figures) == (1000, 3_600_000_000_000, 3)


def test_distribution_empty_and_clamped():
    d = am.distribution([])
    assert d["count"] == 0 and d["p50_us"] is None and d["max_us"] is None and d["min_us"] is None
    assert HdrHistogram.decode(d["hdr"]).get_total_count() == 0
    d = am.distribution([-5, 7_200_000_000_000])  # negative -> 0, two hours -> one hour
    assert d["count"] == 2 and d["clamped"] == 1 and d["min_us"] == 0.0
    assert d["max_us"] == pytest.approx(3.6e9, rel=1e-3)


def test_distribution_has_the_agents_latency_object_keys():
    keys = {"count", "min_us", "mean_us", "std_us", "p50_us", "p90_us", "p99_us", "p999_us", "p9999_us",
            "p999999_us", "max_us", "hdr"}
    assert set(am.distribution([1_000_000])) == keys


# --- series ---

def test_series_buckets_at_interval_edges_and_skips_untimed():
    rows = [
        (T0 + 0.0, {"lat": 1.0, "n": 1}),
        (T0 + 0.999, {"lat": 3.0}),
        (None, {"lat": 100.0}),           # untimed: skipped
        (T0 + 1.0, {"lat": 5.0}),         # on the edge: starts interval 1
        (T0 + 2.5, {"n": 4}),
        (T0 + 0.5, {"n": 2}),             # out of order: "last" follows t, not the line
        (T0 - 0.25, {"n": 9}),            # before t0: a negative interval
    ]
    out = am.series(rows, T0, 1.0, latency_key="lat", unit="ms")
    by = {(r["t_s"], r["name"]): r for r in out}
    assert [(r["t_s"], r["name"]) for r in out] == [(-1.0, "n"), (0.0, "lat"), (0.0, "n"), (1.0, "lat"),
                                                   (2.0, "n")]
    lat0 = by[(0.0, "lat")]
    assert (lat0["count"], lat0["mean"], lat0["last"], lat0["interval_s"]) == (2, 2.0, 3.0, 1.0)
    assert (lat0["p50_us"], lat0["p99_us"], lat0["max_us"]) == (1000.0, 3000.0, 3000.0)
    assert (by[(0.0, "n")]["count"], by[(0.0, "n")]["last"], by[(0.0, "n")]["mean"]) == (2, 2.0, 1.5)
    assert by[(1.0, "lat")]["count"] == 1 and "p50_us" not in by[(2.0, "n")]


def test_series_float_edges_land_in_their_own_interval():
    rows = [(T0 + k * 0.1, {"v": float(k)}) for k in range(20)]
    out = am.series(rows, T0, 0.1)
    assert [r["count"] for r in out] == [1] * 20
    assert [r["t_s"] for r in out] == pytest.approx([k * 0.1 for k in range(20)])
    assert [r["last"] for r in out] == [float(k) for k in range(20)]


def test_series_rejects_a_zero_interval():
    with pytest.raises(SpecError):
        am.series([], T0, 0.0)


# --- Prometheus ---

EXPOSITION = r'''# HELP http_requests_total The total number of HTTP requests.
# TYPE http_requests_total counter
http_requests_total{method="post",code="200"} 1027 1395066363000
http_requests_total{method="post",code="400"}    3 1395066363000

# Escaping in label values:
msdos_file_access_time_seconds{path="C:\\DIR\\FILE.TXT",error="Cannot find file:\n\"FILE.TXT\""} 1.458255915e9

# Minimalistic line:
metric_without_timestamp_and_labels 12.47

# A weird metric from before the epoch:
something_weird{problem="division by zero"} +Inf -3982045

# TYPE temperature gauge
temperature{room="a}b, c"} NaN
temperature{room="kitchen",} -Inf

# A histogram, which has a pretty complex representation in the text format:
# HELP http_request_duration_seconds A histogram of the request duration.
# TYPE http_request_duration_seconds histogram
http_request_duration_seconds_bucket{le="0.05"} 24054
http_request_duration_seconds_bucket{le="0.1"} 33444
http_request_duration_seconds_bucket{le="0.2"} 100392
http_request_duration_seconds_bucket{le="0.5"} 129389
http_request_duration_seconds_bucket{le="1"} 133988
http_request_duration_seconds_bucket{le="+Inf"} 144320
http_request_duration_seconds_sum 53423
http_request_duration_seconds_count 144320
# TYPE rpc_seconds histogram
rpc_seconds_bucket{svc="b",le="+Inf"} 2
rpc_seconds_bucket{le="0.01",svc="b"} 2
rpc_seconds_sum{svc="b"} 0.004
rpc_seconds_count{svc="b"} 2

# Finally a summary, which has a complex representation, too:
# HELP rpc_duration_seconds A summary of the RPC duration in seconds.
# TYPE rpc_duration_seconds summary
rpc_duration_seconds{quantile="0.01"} 3102
rpc_duration_seconds{quantile="0.5"} 4773
rpc_duration_seconds{quantile="0.99"} 76656
rpc_duration_seconds_sum 1.7560473e+07
rpc_duration_seconds_count 2693
{"my.dotted.metric", "odd label"="x"} 5
# EOF
'''


def test_parse_prometheus_realistic_exposition():
    samples = am.parse_prometheus(EXPOSITION)
    by = {(s["name"], tuple(sorted(s["labels"].items()))): s for s in samples}
    assert len(samples) == 25
    s = by[("http_requests_total", (("code", "200"), ("method", "post")))]
    assert (s["value"], s["type"], s["timestamp_ms"], s["family"]) == (1027.0, "counter", 1395066363000,
                                                                      "http_requests_total")
    ms = next(s for s in samples if s["name"] == "msdos_file_access_time_seconds")
    assert ms["labels"] == {"path": "C:\\DIR\\FILE.TXT", "error": 'Cannot find file:\n"FILE.TXT"'}
    assert ms["type"] == "untyped" and ms["timestamp_ms"] is None
    weird = by[("something_weird", (("problem", "division by zero"),))]
    assert weird["value"] == math.inf and weird["timestamp_ms"] == -3982045
    temps = [s for s in samples if s["name"] == "temperature"]
    assert temps[0]["labels"] == {"room": "a}b, c"} and math.isnan(temps[0]["value"])
    assert temps[1]["value"] == -math.inf and temps[1]["type"] == "gauge"
    bucket = by[("http_request_duration_seconds_bucket", (("le", "+Inf"),))]
    assert (bucket["type"], bucket["family"], bucket["value"]) == ("histogram", "http_request_duration_seconds",
                                                                   144320.0)
    q = by[("rpc_duration_seconds", (("quantile", "0.99"),))]
    assert (q["type"], q["value"]) == ("summary", 76656.0)
    assert by[("rpc_duration_seconds_count", ())]["family"] == "rpc_duration_seconds"
    assert by[("rpc_duration_seconds_sum", ())]["value"] == 1.7560473e7
    assert by[("my.dotted.metric", (("odd label", "x"),))]["value"] == 5.0


@pytest.mark.parametrize("line", [
    'm{a="1"',                  # unterminated braces
    'm{a=1} 2',                 # unquoted value
    'm{a="1" b="2"} 3',         # missing comma
    'm{a="1",a="2"} 3',         # label twice
    'm',                        # no value
    'm 1 2 3',                  # too many fields
    'm abc',                    # not a number
    'm 1 1.5',                  # fractional timestamp
    'm{a="1"}2',                # no space before the value
    '{a="1"} 2',                # no name
    '9m 1',                     # bad name
    '# TYPE m sometype',        # unknown type
])
def test_parse_prometheus_malformed_lines_name_their_number(line):
    with pytest.raises(ValueError, match="line 3"):
        am.parse_prometheus(f"# HELP m x\nok 1\n{line}\n")


def test_prometheus_histograms_and_distribution():
    hists = am.prometheus_histograms(am.parse_prometheus(EXPOSITION))
    assert set(hists) == {"http_request_duration_seconds", 'rpc_seconds{svc="b"}'}
    h = hists["http_request_duration_seconds"]
    assert h["buckets"][0] == (0.05, 24054.0) and h["buckets"][-1] == (math.inf, 144320.0)
    assert (h["sum"], h["count"], h["labels"]) == (53423.0, 144320.0, {})
    assert hists['rpc_seconds{svc="b"}']["buckets"] == [(0.01, 2.0), (math.inf, 2.0)]
    d = am.histogram_distribution(h["buckets"], 1e9, total=h["sum"])
    assert d["count"] == 144320
    assert d["mean_us"] == pytest.approx(53423 / 144320 * 1e6, rel=1e-6)
    # 10332 observations above 1 s sit at 1 s (the highest finite bound): max and p99 are 1 s.
    assert d["max_us"] == pytest.approx(1e6, rel=1e-3) and d["p99_us"] == pytest.approx(1e6, rel=1e-3)
    # p50 (rank 72160) is in (0.1, 0.2]: 38716 of its 66948 observations, linearly placed.
    assert d["p50_us"] == pytest.approx((0.1 + 0.1 * (72160 - 33444) / 66948) * 1e6, rel=2e-3)


def test_histogram_distribution_on_known_buckets():
    # 100 observations all in (1 ms, 5 ms]: spread evenly, so the min, median and max are known.
    d = am.histogram_distribution([(0.001, 0), (0.005, 100), (0.01, 100), (math.inf, 100)], 1e9)
    assert d["count"] == 100
    assert d["min_us"] == pytest.approx(1000 + 4000 * 0.5 / 100, rel=1e-3)
    assert d["p50_us"] == pytest.approx(1000 + 4000 * 49.5 / 100, rel=1e-3)
    assert d["max_us"] == pytest.approx(1000 + 4000 * 99.5 / 100, rel=1e-3)
    assert d["mean_us"] == pytest.approx(3000, rel=1e-3)
    assert HdrHistogram.decode(d["hdr"]).get_total_count() == 100
    # Bounds in ms, first bound 0: a bucket of zeros.
    d = am.histogram_distribution([(0, 10), (2, 20)], 1e6)
    assert d["count"] == 20 and d["min_us"] == 0.0 and d["p50_us"] == 0.0
    assert d["max_us"] == pytest.approx(1900, rel=1e-3)  # 10 points at 0.1, 0.3 .. 1.9 ms
    # Millions of observations cost no more than BUCKET_POINTS points per bucket.
    d = am.histogram_distribution([(1.0, 5_000_000), (math.inf, 5_000_001)], 1e9)
    assert d["count"] == 5_000_001 and d["p50_us"] == pytest.approx(5e5, rel=2e-3)
    # Only +Inf: nothing to place them at.
    d = am.histogram_distribution([(math.inf, 5)], 1e9)
    assert d["count"] == 0 and d["unestimated"] == 5 and d["p50_us"] is None


# --- scraping ---

class _Exporter(BaseHTTPRequestHandler):
    hits = 0

    def do_GET(self):  # noqa: N802 (http.server's name)
        if self.path != "/metrics":
            self.send_error(404)
            return
        type(self).hits += 1
        body = (f"# TYPE requests counter\nrequests_total {type(self).hits}\n"
                f'# TYPE lat histogram\nlat_bucket{{le="0.1"}} 3\nlat_bucket{{le="+Inf"}} 4\n'
                f"lat_sum 0.5\nlat_count 4\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def exporter():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Exporter)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()


def _connect(calls):
    def connect(host, port, timeout):
        calls.append((host, port, timeout))
        return socket.create_connection((host, port), timeout)
    return connect


def _wait(pred, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not pred() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_scraper_scrapes_every_interval_from_the_own_host(exporter):
    calls: list = []
    sc = am.PrometheusScraper(f"http://:{exporter}/metrics", 0.05, _connect(calls))
    sc.start()
    try:
        _wait(lambda: len(sc.scrapes()) >= 4)
    finally:
        sc.stop()
    sc.stop()  # idempotent
    scrapes = sc.scrapes()
    assert len(scrapes) >= 4 and sc.errors() == []
    assert calls[0][:2] == ("127.0.0.1", exporter)
    times = [t for t, _ in scrapes]
    assert times == sorted(times) and all(abs(t - time.time()) < 60 for t in times)
    counts = [next(s["value"] for s in samples if s["name"] == "requests_total") for _, samples in scrapes]
    assert counts == sorted(counts) and len(set(counts)) == len(counts)
    assert am.prometheus_histograms(scrapes[-1][1])["lat"]["buckets"] == [(0.1, 3.0), (math.inf, 4.0)]
    n = len(sc.scrapes())
    time.sleep(0.15)
    assert len(sc.scrapes()) == n  # stopped means stopped


def test_scraper_keeps_errors_and_goes_on(exporter):
    sc = am.PrometheusScraper(f"http://127.0.0.1:{exporter}/nothing", 0.05, _connect([]))
    assert sc.scrape_once() is False
    assert "404" in sc.errors()[0] and sc.scrapes() == []
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    sc = am.PrometheusScraper(f"http://127.0.0.1:{dead}/metrics", 0.02, _connect([]))
    sc.start()
    _wait(lambda: len(sc.errors()) >= 3)
    sc.stop()
    assert len(sc.errors()) >= 3 and sc.scrapes() == []
    with pytest.raises(RoughnetError):
        sc.start()


def test_scraper_rejects_bad_interval():
    with pytest.raises(SpecError):
        am.PrometheusScraper("http://:9100/metrics", 0, _connect([]))


def test_check_url():
    assert am.check_url("http://:9100/metrics") == ("", 9100, "/metrics")
    assert am.check_url("http://10.0.0.2:8080/m?x=1") == ("10.0.0.2", 8080, "/m?x=1")
    assert am.check_url("http://[::1]:9100/metrics") == ("::1", 9100, "/metrics")
    for url, why in [("https://:9100/metrics", "not http"), ("http://host/metrics", "no port"),
                     ("http://host:0/metrics", "no port"), ("http://host:99999/m", "out of range"),
                     ("http://host:9100", "no path"), ("localhost:9100/metrics", "not http"),
                     ("http://u:p@host:9100/m", "user info"), ("http://host:x/m", "Port"), ("", "not http")]:
        with pytest.raises(ValueError, match=why) as e:
            am.check_url(url)
        assert isinstance(e.value, SpecError) and "http://[host]:port/path" in str(e.value)
