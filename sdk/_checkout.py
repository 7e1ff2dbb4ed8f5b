"""``import sdk`` from a source checkout where the project is not installed.

``sdk.core``, ``sdk.plugins`` and ``sdk.tools`` are the checkout's ``core/``, ``plugins/`` and
``tools/``, mapped by the install (``pyproject.toml``'s package directories). Run from a
checkout's root without the install, Python finds ``./sdk`` and ``import sdk`` failed on
``sdk.core`` with no word of why ("No module named 'sdk.core'"). Imported first by
``sdk/__init__.py``: it raises an ``ImportError`` that names the cause and the fix.
"""

from __future__ import annotations

import importlib.util
import os


def problem(root: str) -> str | None:
    """Why ``sdk`` cannot be imported from checkout ``root`` uninstalled, or None where
    ``root`` is no checkout (an installed copy lacks ``sdk.core`` for another reason)."""
    if not os.path.isfile(os.path.join(root, "core", "__init__.py")):
        return None
    return (
        f"'sdk' was imported from the source checkout {root} (the current directory or "
        "PYTHONPATH), where it is not installed: the checkout's core/, plugins/ and tools/ "
        "become sdk.core, sdk.plugins and sdk.tools only through the install. Install it "
        "(pip install -e . in that directory, as the README's set-up command does), or run "
        "from another directory where the installed package is imported."
    )


if importlib.util.find_spec("sdk.core") is None:
    _why = problem(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if _why is not None:
        raise ImportError(_why)
