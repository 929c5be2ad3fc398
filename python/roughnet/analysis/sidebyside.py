"""One sweep on several backends, side by side: ``roughnet run FILE --backend namespace,ns3``.

Owns what is not the terminal's: reading the backend list (each a known backend, no repeats, at
least two: else a SpecError naming the value, exit 2), where each backend's results go
(``<results>/<backend>``: a store keeps one record per run id, and the runs are the same on every
backend), and the comparison of every further backend against the first, written to
``<results>/reports/<sweep>--<first>-vs-<other>/``: ``compare.json`` and ``compare.png``
(``roughnet.analysis.compare``: per point and metric both values and the difference; one panel per metric),
``sidebyside.png`` and ``index.html`` (``report.sidebyside``: both backends' values in one plot per
metric, one table per metric with the difference); the same plot and tables go into each backend's normal
report (``<results>/<backend>/reports/<sweep>/index.html``) as a section after its plots.
The CLI runs the sweep on each backend (``cli.run``) and prints; this module prints nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..backends import BACKENDS
from ..errors import SpecError


def parse_backends(text: str) -> list[str]:
    """``"namespace,ns3"`` -> ["namespace", "ns3"]; one name -> a list of one."""
    names = [n.strip() for n in text.split(",")]
    for n in names:
        if n not in BACKENDS:
            raise SpecError(f"--backend {text}: unknown backend {n!r}; expected one of {', '.join(BACKENDS)}, "
                            "or several separated by commas (namespace,ns3)")
    if len(set(names)) != len(names):
        raise SpecError(f"--backend {text}: a backend is named twice; expected each at most once")
    return names


def results_of(root: Path, backend: str) -> Path:
    """Where one backend's results go when a sweep runs on several."""
    return root / backend


def compare_backends(root: Path, sweep_id: str, first: str, other: str) -> tuple[Any, Path]:
    """``other``'s runs of ``sweep_id`` against ``first``'s: the Comparison and the folder its files went to."""
    from .compare import column_title, compare, metric_columns, open_results, read_side
    from ..report.compare_plot import compare_png
    from ..report import build_report
    from ..report.sidebyside import index_html, section, values_png

    stores = [open_results(results_of(root, first)), open_results(results_of(root, other))]
    try:
        side_a = read_side(stores[0], "A", sweep_id, [])
        side_b = read_side(stores[1], "B", sweep_id, [])
        columns = metric_columns([], side_a.runs, side_b.runs)
        result = compare(side_a, side_b, columns)
        plain = {c: column_title(result, c) for c in columns}
        both = values_png(result, plain, (first, other))
        # each backend's normal report gets the side by side too (one plot, one table per metric)
        for store in stores:
            build_report(store, sweep_id, extra=[section(result, plain, (first, other), both)])
    finally:
        for s in stores:
            s.close()
    folder = root / "reports" / f"{sweep_id}--{first}-vs-{other}"
    folder.mkdir(parents=True, exist_ok=True)
    doc = result.to_dict() | {"backends": {"A": first, "B": other}}
    (folder / "compare.json").write_text(json.dumps(doc, indent=1, default=str) + "\n", encoding="utf-8")
    titles = {c: f"{column_title(result, c)}: {other} vs {first}" for c in columns}
    (folder / "compare.png").write_bytes(compare_png(result, titles))
    (folder / "sidebyside.png").write_bytes(both)
    (folder / "index.html").write_text(index_html(result, plain, (first, other), "sidebyside.png"), encoding="utf-8")
    return result, folder
