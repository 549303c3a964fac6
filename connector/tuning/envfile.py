"""Writing learned weights where the settings read them: CONNECTOR_WEIGHT_* lines of a `.env` file."""

from __future__ import annotations

import os
from pathlib import Path

PREFIX = "CONNECTOR_WEIGHT_"
COMMENT = "# metric weights learned by `connector tune`"


def write_weights(path: Path, weights: dict[str, float]) -> None:
    """Replace the file's CONNECTOR_WEIGHT_* lines (every other line kept as it was), atomically."""
    kept = []
    if path.exists():
        kept = [x for x in path.read_text(encoding="utf-8").splitlines() if not x.startswith(PREFIX) and x != COMMENT]
    lines = [*kept, COMMENT, *(f"{PREFIX}{name.upper()}={value:g}" for name, value in weights.items())]
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    os.replace(tmp, path)
