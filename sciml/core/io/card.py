"""The model card (``README.md`` of an artifact, docs/design.md §4): one layout, each family fills the sections.

Every card reads the same way: a title, one paragraph saying what the model predicts and in which unit, then
``## Data`` (source, hash, split), ``## <metrics title>`` (measured on the held-out split at export), and
``## Intended use and limits``.
"""

from __future__ import annotations

from collections.abc import Sequence

METRICS_TITLE = "Metrics on the test split"
NOT_RECORDED = "- not recorded"


def model_card(name: str, summary: str, *, data: Sequence[str], metrics: Sequence[str], limits: Sequence[str],
               metrics_title: str = METRICS_TITLE) -> str:
    """Markdown model card.

    Parameters
    ----------
    name : str
        Artifact name (the folder name), the card's title.
    summary : str
        One paragraph: the model, what it predicts, units.
    data, metrics, limits : sequence of str
        Markdown lines (usually ``- ...`` bullets) of the data, metrics and intended-use sections.
    metrics_title : str
        Heading of the metrics section (e.g. ``"Metrics on the test conditions (mean over conditions)"``).
        An empty section reads ``- not recorded``: a card always shows all three.

    """
    data, metrics, limits = ([*body] or [NOT_RECORDED] for body in (data, metrics, limits))
    lines = [f"# {name}", "", summary, "", "## Data", *data, "", f"## {metrics_title}", *metrics, "",
             "## Intended use and limits", *limits, ""]
    return "\n".join(lines)
