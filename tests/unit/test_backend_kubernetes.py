"""The Kubernetes backend without a cluster: placement, what preflight refuses, pod manifests, options.

The backend against a real cluster is tests/integration/test_kubernetes_backend.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from specutil import plan_error, plan_text

from roughnet.backends import backend_for
from roughnet.backends.kubernetes import KubernetesBackend
from roughnet.backends.kubernetes.env import RUN_LABEL, _why_waiting, pod_manifest, pod_name
from roughnet.backends.kubernetes.kubectl import Kubectl
from roughnet.backends.kubernetes.podwire import merge_counters, wire_config
from roughnet.errors import PreflightError

IMAGE = "roughnet.local/roughnet:test"


def scenario(hosts: str, link: str = "", services: str = "", protocol: str = "tcp") -> str:
    return f"""
[scenario]
name = "k8s"
{hosts}
[[link]]
between = ["a", "b", "c"]
{link}
{services}
[workload]
pattern = "stream"
protocol = "{protocol}"
from = "a"
to = ["b", "c"]
messages = 10
rate = "10 msg/s"
payload = "100 B"
"""


HOSTS = '[[host]]\nname = "a"\n[[host]]\nname = "b"\n[[host]]\nname = "c"\n'


def facts(**nodes) -> dict:
    base = {"ready": True, "schedulable": True, "kernel": "6.1", "os": "Debian", "kubelet": "v1.32.13",
            "runtime": "containerd://1.6.20", "pod_cidr": None, "images": [IMAGE]}
    return {"server_version": "v1.32.13", "nodes": {n: {**base, **v} for n, v in nodes.items()}}


def backend(local: bool = True) -> KubernetesBackend:
    return KubernetesBackend(Kubectl("kubectl", Path("/nonexistent"), "roughnet"), IMAGE, local)


def test_hosts_spread_round_robin_over_ready_schedulable_nodes_by_name():
    sweep = plan_text(scenario(HOSTS))
    b = backend()
    b.check(sweep, facts(node2={}, node1={}, cp={"schedulable": False}, node3={"ready": False}))
    assert b.placement[sweep.runs[0].run_id] == {"a": "node1", "b": "node2", "c": "node1"}


def test_a_host_may_name_its_node_and_the_others_still_spread():
    hosts = HOSTS.replace('name = "b"\n', 'name = "b"\nnode = "node2"\n')
    sweep = plan_text(scenario(hosts))
    b = backend()
    b.check(sweep, facts(node1={}, node2={}, node3={}))
    assert b.placement[sweep.runs[0].run_id] == {"a": "node1", "b": "node2", "c": "node2"}


def test_an_unknown_or_not_ready_node_is_refused_naming_it():
    sweep = plan_text(scenario(HOSTS.replace('name = "c"\n', 'name = "c"\nnode = "node9"\n')))
    with pytest.raises(PreflightError, match="host c asks for node 'node9'.*has node1, node2"):
        backend().check(sweep, facts(node1={}, node2={}))
    sweep = plan_text(scenario(HOSTS.replace('name = "c"\n', 'name = "c"\nnode = "node2"\n')))
    with pytest.raises(PreflightError, match="node 'node2', which is not Ready"):
        backend().check(sweep, facts(node1={}, node2={"ready": False}))


def test_no_node_that_takes_pods_is_refused():
    sweep = plan_text(scenario(HOSTS))
    with pytest.raises(PreflightError, match="no Ready node takes pods"):
        backend().check(sweep, facts(cp={"schedulable": False}))


@pytest.mark.parametrize("link", ['rate = "10 Mbit/s"', 'loss = "1%"', 'delay = "5 ms"\nengine = "wire"'])
def test_an_impaired_segment_puts_a_wire_in_every_members_pod(link):
    sweep = plan_text(scenario(HOSTS, link))
    b = backend()
    b.check(sweep, facts(node1={}))
    run = sweep.runs[0]
    assert b.engines(run, None) == {0: "pod-wire"}
    assert sorted(b.wires[run.run_id]) == ["a", "b", "c"]


PAIR = """
[scenario]
name = "pair"
[[host]]
name = "a"
[[host]]
name = "b"
[[host]]
name = "c"
[[link]]
between = ["a", "b"]
delay = "10 ms"
[link.reverse]
loss = "2%"
[[link]]
between = ["LEFT", "c"]
[workload]
pattern = "stream"
protocol = "tcp"
from = "a"
to = ["b"]
messages = 10
rate = "10 msg/s"
payload = "100 B"
"""


def test_a_two_host_link_is_carried_by_its_first_host_with_forward_as_its_egress():
    sweep = plan_text(PAIR.replace("LEFT", "b"))
    b = backend()
    b.check(sweep, facts(node1={}, node2={}))
    run = sweep.runs[0]
    assert list(b.wires[run.run_id]) == ["a"]
    assert b.engines(run, None) == {0: "pod-wire", 1: "cluster"}
    link = run.links[0]
    cfg = wire_config(link)
    # a = eth0 (into the pod), b = rnw0 (out of it): forward (a -> b in the scenario) leaves the pod
    assert cfg["b_to_a"]["delay_ns"] == 10_000_000 and "loss" not in cfg["b_to_a"]
    assert cfg["a_to_b"]["loss"] == {"model": "bernoulli", "p": 0.02} and cfg["a_to_b"]["delay_ns"] == 10_000_000


def test_a_host_that_carries_a_wire_must_be_on_one_link_only():
    sweep = plan_text(PAIR.replace("LEFT", "a"))
    with pytest.raises(PreflightError, match="link 0 \\(a, b\\) is impaired and host a is also on link\\(s\\) 1"):
        backend().check(sweep, facts(node1={}))


def test_carriers_counters_merge_summing_counts_and_keeping_peaks():
    one = {"forward": {"drops_loss": 3, "tx_packets": 10, "queue_high_packets": 4, "up": True}, "reverse": {}}
    two = {"forward": {"drops_loss": 1, "tx_packets": 5, "queue_high_packets": 9, "up": True}, "reverse": {}}
    merged = merge_counters({"a": one, "b": two})
    assert merged["forward"] == {"drops_loss": 4, "tx_packets": 15, "queue_high_packets": 9, "up": True}
    assert merged["engine"] == "pod-wire" and set(merged["pods"]) == {"a", "b"}


def test_capture_and_overlay_are_refused():
    with pytest.raises(PreflightError, match="capture"):
        backend().check(plan_text(scenario(HOSTS, "capture = true")), facts(node1={}))


def test_kafka_is_not_in_the_image_but_mosquitto_is():
    kafka = '[[service]]\nkind = "kafka"\nhost = "a"\n'
    with pytest.raises(PreflightError, match="service 'kafka' on host a is not in roughnet's image"):
        backend().check(plan_text(scenario(HOSTS, services=kafka, protocol="kafka")), facts(node1={}))
    mqtt = '[[service]]\nkind = "mosquitto"\nhost = "a"\n'
    b = backend()
    sweep = plan_text(scenario(HOSTS, services=mqtt, protocol="mqtt"))
    b.check(sweep, facts(node1={}))
    assert b.engines(sweep.runs[0], None) == {0: "cluster"}


def test_image_missing_on_a_cluster_that_pulls_nothing_is_refused():
    sweep = plan_text(scenario(HOSTS))
    with pytest.raises(PreflightError, match=f"image {IMAGE} is not on node\\(s\\) node1.*roughnet image build"):
        backend(local=True).check(sweep, facts(node1={"images": []}))
    backend(local=False).check(sweep, facts(node1={"images": []}))  # an own cluster may pull it


def test_pod_manifest_is_labelled_pinned_and_runs_roughnets_image():
    m = pod_manifest("0123abcd", "0123abcdef01", "car1", "node2", IMAGE, "Never")
    assert m["metadata"]["name"] == pod_name("0123abcd", "car1") == "rn-0123abcd-car1"
    assert m["metadata"]["labels"][RUN_LABEL] == "0123abcd"
    term = m["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["node2"]
    (c,) = m["spec"]["containers"]
    assert c["image"] == IMAGE and c["imagePullPolicy"] == "Never"
    assert m["spec"]["restartPolicy"] == "Never"


def test_why_a_pod_waits_is_what_its_status_says():
    assert _why_waiting(None) == "not created"
    pod = {"status": {"phase": "Pending", "containerStatuses": [
        {"state": {"waiting": {"reason": "ErrImageNeverPull", "message": "image not present"}}}]}}
    assert "ErrImageNeverPull" in _why_waiting(pod)


def test_node_key_is_a_node_name_and_takes_part_in_the_run_id_only_when_set():
    err = plan_error(scenario(HOSTS.replace('name = "c"\n', 'name = "c"\nnode = "Node_1"\n')))
    assert "node" in str(err) and "Kubernetes node name" in str(err)
    plain = plan_text(scenario(HOSTS)).runs[0]
    pinned = plan_text(scenario(HOSTS.replace('name = "c"\n', 'name = "c"\nnode = "node1"\n'))).runs[0]
    assert plain.run_id != pinned.run_id
    # ids stored before the key existed stay valid: an unset node is left out of the hash
    # (4b48e6436ca3 is what roughnet computed for this scenario before [[host]] had a node key)
    assert plain.run_id == "4b48e6436ca3"


def test_backend_options_only_for_kubernetes():
    with pytest.raises(PreflightError, match="--kubeconfig: only for --backend kubernetes"):
        backend_for("namespace", kubeconfig=Path("x"), image=None, namespace=None, cluster=None)
    with pytest.raises(PreflightError, match="unknown backend 'mesos'"):
        backend_for("mesos")
    with pytest.raises(PreflightError, match="--kubeconfig /nonexistent/kc: no such file"):
        backend_for("kubernetes", kubeconfig=Path("/nonexistent/kc"), image=None, namespace=None, cluster=None)
