"""The records' series as Prometheus text, each record rendered once: what /metrics serves.

prometheus_client renders a scrape sample by sample: it validates and escapes every label of
every series and formats every value, each time. The records' series are most of a worker's
(about 150 a model with the default selection, over 900 with everything exported: 93 938 for
100 models, 0.53 s a scrape on the development machine), and a scrape runs in the worker's
process, where it holds the interpreter from the data path. :class:`SeriesText` renders a
record's series when the record is new (the exporter keeps a model's latest record per view,
however often it publishes), reuses the label text of the record it replaces where a series is
the same, and serves the joined text from a cache until a record changes. The series are those
of :class:`~streameval.series.SnapshotCollector` (one walk,
:meth:`~streameval.series.SnapshotCollector.record_series`, feeds both), in the text format
that ``prometheus_client.generate_latest`` writes; a test compares the two family by family.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.utils import floatToGoString

from streameval.series import FAMILIES, Series, SnapshotCollector

__all__ = ["SeriesText"]


def escape_label(value: str) -> str:
    """A label value as the text format wants it: backslash, newline and quote escaped.

    >>> print(escape_label('a "b" \\\\ c'))
    a \\"b\\" \\\\ c
    """
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _header(name: str, help_text: str) -> str:
    escaped = help_text.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {name} {escaped}\n# TYPE {name} gauge\n"


class SeriesText:
    """The records' series of a :class:`~streameval.series.SnapshotCollector`, as text.

    Examples
    --------
    >>> from streameval.series import Selection
    >>> collector = SnapshotCollector(lambda: ({}, {}), lambda: {}, Selection())
    >>> text = SeriesText(collector).render().decode()
    >>> text.splitlines()[:2]  # doctest: +NORMALIZE_WHITESPACE
    ['# HELP streameval_measure Latest value of a measure of a model (NaN: undefined).',
     '# TYPE streameval_measure gauge']
    """

    def __init__(self, collector: SnapshotCollector) -> None:
        self._collector = collector
        self._headers = {key: _header(name, text) for key, (name, text, _) in FAMILIES.items()}
        # per family: the start of a line, and its labels in name order (prometheus_client
        # writes them sorted) as (position in the series' label values, 'name="')
        self._prefixes = {
            key: (
                f"{name}{{",
                tuple((labels.index(label), f'{label}="') for label in sorted(labels)),
            )
            for key, (name, _, labels) in FAMILIES.items()
        }
        # per record: the record it was rendered from, its lines by family, and the start of
        # each of its lines (family, label values, text up to the value)
        self._rendered: dict[tuple, tuple[Any, dict[str, str], list]] = {}
        self._text = b""
        self._escaped: dict[str, str] = {}  # label values escaped, during one render
        self._basis: tuple[dict, dict] | None = None

    def render(self) -> bytes:
        """Every series of the latest records, encoded; rendered again only where a record
        changed."""
        metrics, comparisons = self._collector.latest()
        if self._basis is not None and self._basis[0] is metrics and self._basis[1] is comparisons:
            return self._text  # the exporter swaps in new dicts when a record changes
        walk = self._collector
        self._escaped = {}
        rendered: dict[tuple, dict[str, str]] = {}
        for where, record in metrics.items():  # (model, view), a slice's (model, view, slice)
            key = ("metrics", *where)
            rendered[key] = self._lines(key, record, walk.record_series(*where[:2], record))
        for pair, record in comparisons.items():
            key = ("comparison", pair)
            rendered[key] = self._lines(key, record, walk.comparison_series(pair, record))
        # forget what a record no longer held (a model this worker no longer owns)
        self._rendered = {key: self._rendered[key] for key in rendered}
        chunks = []
        for family in FAMILIES:
            chunks.append(self._headers[family])
            chunks.extend(lines.get(family, "") for lines in rendered.values())
        self._text = "".join(chunks).encode()
        self._basis = (metrics, comparisons)
        return self._text

    def _lines(self, key: tuple, record: Any, series: Iterator[Series]) -> dict[str, str]:
        """A record's lines by family: from the cache while the record is the same object (the
        exporter keeps the latest record of each; records are immutable). A newer record of the
        same model has mostly the same series in the same order: their label text is reused."""
        cached = self._rendered.get(key)
        if cached is not None and cached[0] is record:
            return cached[1]
        before = cached[2] if cached is not None else []
        known = len(before)
        starts: list[tuple[str, tuple[str, ...], str]] = []
        by_family: dict[str, list[str]] = {}
        for i, (family, labels, value) in enumerate(series):
            if i < known and before[i][1] == labels and before[i][0] == family:
                start = before[i][2]
            else:
                start = self._start(family, labels)
            starts.append((family, labels, start))
            by_family.setdefault(family, []).append(f"{start}{floatToGoString(value)}\n")
        lines = {family: "".join(found) for family, found in by_family.items()}
        self._rendered[key] = (record, lines, starts)
        return lines

    def _start(self, family: str, labels: tuple[str, ...]) -> str:
        """A sample's line up to its value: name, labels in name order, escaped."""
        name, order = self._prefixes[family]
        escaped = self._escaped
        parts = []
        for at, label in order:
            value = labels[at]
            text = escaped.get(value)
            if text is None:
                text = escaped[value] = escape_label(value)
            parts.append(f'{label}{text}"')
        return f"{name}{','.join(parts)}}} "
