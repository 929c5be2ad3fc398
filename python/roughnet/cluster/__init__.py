"""roughnet's local Kubernetes: a real cluster whose nodes are network namespaces of this machine.

Who does what: ``state`` is the state file and the API other code uses (``load``,
``ClusterState.kubectl_argv``); ``layout`` names and addresses everything (pure);
``pki`` makes the certificates and kubeconfigs with openssl; ``configs`` writes the
components' configuration files and command lines (pure); ``ledger`` gives a cluster's
ledger its lifetime (it outlives `cluster up`); ``procs`` starts daemons, cgroups,
sysctls and mounts; ``up`` brings a cluster up, ``down`` replays a cluster's ledger to take
it (or what a killed `cluster up` left) away again, and ``ops`` is `cluster down` and
`cluster status` of a named cluster.
"""

from .state import (DEFAULT_NAME, ClusterError, ClusterNotFound, ClusterPreflightError, ClusterState, NodeState,
                    list_clusters, load)

__all__ = ["DEFAULT_NAME", "ClusterError", "ClusterNotFound", "ClusterPreflightError", "ClusterState", "NodeState",
           "list_clusters", "load"]
