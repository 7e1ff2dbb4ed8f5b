"""``python -m sdk bench --plot FILE``: each row's sdk/Inductor and sdk/eager time ratios as a
bar chart, with the 1.0 line (below it the sdk is faster). Needs matplotlib, an optional
extra: ``pip install 'torch-backend-sdk[plot]'``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

INSTALL = "pip install 'torch-backend-sdk[plot]' (or: pip install matplotlib)"


def missing() -> str | None:
    """Why ``--plot`` cannot run here (matplotlib is missing) and the fix, or None."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        return f"--plot needs matplotlib ({exc}); {INSTALL}"
    return None


def json_beside(plot: str) -> str:
    """Where ``--plot FILE`` without ``--json`` writes the results: FILE's name with .json."""
    return str(Path(plot).with_suffix(".json"))


def plot_file(results_json: str, path: str) -> int:
    """Draw the rows of a ``--json`` results file into ``path``; returns how many rows have
    both ratios (a skipped or mismatching row is drawn as "n/a")."""
    data = json.loads(Path(results_json).read_text())
    return plot(data["rows"], path, _title(data))


def _title(data: dict[str, Any]) -> str:
    machine = data.get("machine") or {}
    where = machine.get("device") or machine.get("gpu") or machine.get("cpu") or ""
    suite = (data.get("method") or {}).get("suite", "kernels")
    return f"sdk bench --suite {suite}" + (f", {where}" if where else "")


def plot(rows: list[dict[str, Any]], path: str, title: str = "") -> int:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    names = [r["name"] for r in rows]
    series = (
        ("sdk / Inductor", [r.get("sdk_over_inductor") for r in rows]),
        ("sdk / eager", [r.get("sdk_over_eager") for r in rows]),
    )
    fig, ax = plt.subplots(figsize=(max(6.0, 0.6 * len(rows) + 2), 4.5))
    width = 0.4
    for k, (label, values) in enumerate(series):
        xs = [i + (k - 0.5) * width for i in range(len(rows))]
        ax.bar(xs, [v or 0.0 for v in values], width, label=label)
        for x, v in zip(xs, values, strict=True):
            if v is None:
                ax.text(x, 0.02, "n/a", ha="center", va="bottom", rotation=90, fontsize=7)
    ax.axhline(1.0, color="black", linewidth=1, linestyle="--")
    ax.set_xticks(range(len(rows)), names, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("time ratio (below 1: the sdk is faster)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return sum(
        1 for r in rows if r.get("sdk_over_inductor") is not None and r.get("sdk_over_eager")
    )
