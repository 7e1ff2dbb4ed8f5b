"""``python -m sdk new-plugin NAME [--c-like | --graph]``: a plugin package to start from.

It writes a directory with ``pyproject.toml`` (the ``sdk.plugins`` and
``torch_dynamo_backends`` entry points), a README and the plugin package
``<NAME>_sdk_plugin``. ``pip install`` it and ``python -m sdk list`` shows it;
``python -m sdk conformance NAME`` passes out of the box (kernel-level plugins: the suite
does not take graph-level ones).

* default: every hook, in the order a compile calls them, each doing the safe thing; it
  refuses every op, so ATen runs them (right, not faster). For targets that are not C-like.
* ``--c-like``: a working C/OpenMP plugin with fusion and training: a table of op strings
  (``target.py``, for :mod:`sdk.clike`), a compile function (:mod:`sdk.toolchain`) and a
  worked ``sdk_lower_op`` (``aten.elu``, which the core does not lower).
* ``--graph``: a graph-level plugin (hook API 3) for a vendor compiler that takes whole
  subgraphs: it claims a few pointwise ops and runs each claimed partition through
  ``torch.fx.Interpreter``, in the one function where the vendor's compiler goes.
"""

from __future__ import annotations

import keyword
from pathlib import Path

TEMPLATES = Path(__file__).parent / "templates"


def module_name(name: str) -> str:
    return f"{name}_sdk_plugin"


def sdk_requirement() -> str:
    """The dependency a generated plugin declares on this SDK: ``torch-backend-sdk>=V,<M``.

    V is this SDK's version: it provides the hook-API version the scaffold declares and the
    rest of the ``sdk`` API it uses. M is the next major version, the first that may stop
    loading a hook-API version: every release loads plugins of hook API 1 to its
    ``HOOK_API_VERSION``, and one that adds a hook-API version raises the minor version
    (docs/vendor-guide.md, "Versioning").
    """
    from sdk import __version__

    major = int(__version__.split(".")[0])
    return f"torch-backend-sdk>={__version__},<{major + 1}"


def generate(name: str, dest: str | Path, *, c_like: bool = False, graph: bool = False) -> Path:
    """Write the plugin package for ``name`` into ``dest/<name>-sdk-plugin``; return it."""
    if c_like and graph:
        raise ValueError("choose one of --c-like (kernel-level C) and --graph (graph-level)")
    if not name.isidentifier() or keyword.iskeyword(name) or not name.islower():
        raise ValueError(
            f"plugin name {name!r} must be a lower-case Python identifier "
            "(it is the entry-point name and part of the package name), "
            "e.g. 'acme' or 'acme_npu'"
        )
    dist = f"{name.replace('_', '-')}-sdk-plugin"
    root = Path(dest) / dist
    if root.exists():
        raise FileExistsError(f"{root} exists; remove it or choose another destination")
    package = root / module_name(name)
    files = {
        root / "pyproject.toml": "common/pyproject.toml.tmpl",
        root / "README.md": "common/README_graph.md.tmpl" if graph else "common/README.md.tmpl",
    }
    flavor = "c_like" if c_like else "graph" if graph else "fallback"
    for tmpl in sorted((TEMPLATES / flavor).glob("*.tmpl")):
        files[package / tmpl.name.removesuffix(".tmpl")] = f"{flavor}/{tmpl.name}"
    for path, tmpl in files.items():
        text = (TEMPLATES / tmpl).read_text()
        text = text.replace("{{name}}", name).replace("{{module}}", module_name(name))
        text = text.replace("{{sdk_requirement}}", sdk_requirement())
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.replace("{{dist}}", dist))
    return root
