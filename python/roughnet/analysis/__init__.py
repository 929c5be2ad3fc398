"""Analysis over stored runs: statistics (``stats``: intervals, tests, the verdicts of a point), comparing two
sweeps or two backends (``compare``, ``sidebyside``) and searching for the load a system sustains (``search``).
Read by the report and the CLI; runs nothing itself except ``search``'s probes, which go through ``run``."""
