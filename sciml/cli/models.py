"""``sciml models [--json]``: the shipped models, with what each predicts, was trained on, and its domain."""

from __future__ import annotations

import json
import textwrap


def add_parser(sub, name: str) -> None:
    """Register ``models``."""
    p = sub.add_parser(name, help="list the shipped models: family, target and unit, training data, domain")
    p.add_argument("--json", action="store_true", help="print a JSON list instead of the text blocks")
    p.set_defaults(run=run)


def run(args, overrides: list[str]) -> int:
    """Print one block per shipped model (``--model NAME`` works from any folder)."""
    from sciml.core.io.catalogue import shipped_catalogue

    models = shipped_catalogue()
    if args.json:
        print(json.dumps([m.to_dict() for m in models], indent=1))
        return 0
    if not models:
        print("no shipped models in this install (checkpoints/ or sciml/_shipped/checkpoints/ is empty)")
        return 0
    for m in models:
        print(f"{m.name}  ({m.family})")
        for label, text in (("predicts", f"{m.target}: {m.summary}" if m.summary else m.target),
                            ("trained on", m.trained_on), ("domain", m.domain), ("use", m.usage)):
            print(textwrap.fill(text, width=116, initial_indent=f"  {label:<11}", subsequent_indent=" " * 13))
        print()
    print("pass a name to --model from any folder (or a path to your own exported model folder)")
    return 0
