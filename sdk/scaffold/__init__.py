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
  worked ``sdk_lower_op`` (``aten.elu``, in place of the core's lowering).
* ``--graph``: a graph-level plugin (hook API 3) for a vendor compiler that takes whole
  subgraphs: it claims a few pointwise ops and runs each claimed partition through
  ``torch.fx.Interpreter``, in the one function where the vendor's compiler goes.
"""

from __future__ import annotations

import keyword
import re
import shutil
import tempfile
from pathlib import Path

TEMPLATES = Path(__file__).parent / "templates"
#: The longest plugin name: it is the entry-point name, and part of the package, the
#: distribution and the directory written (file names have a length limit).
MAX_NAME = 40
_NAME = re.compile(r"[a-z][a-z0-9_]*")


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


def check_name(name: str) -> None:
    """Raise ValueError, with the rule, unless ``name`` can name a plugin: a lower-case ASCII
    Python identifier of at most :data:`MAX_NAME` characters starting with a letter (it is
    the entry-point name, and the package ``<name>_sdk_plugin`` and distribution
    ``<name>-sdk-plugin`` are made from it)."""
    if not _NAME.fullmatch(name) or keyword.iskeyword(name) or len(name) > MAX_NAME:
        shown = name if len(name) <= MAX_NAME else f"{name[:MAX_NAME]}... ({len(name)} characters)"
        raise ValueError(
            f"plugin name {shown!r} must be a lower-case Python identifier "
            f"of 1 to {MAX_NAME} ASCII letters, digits and underscores, starting with a "
            "letter and not a keyword (it is the entry-point name and part of the package "
            "and distribution names), e.g. 'acme' or 'acme_npu'"
        )


def generate(name: str, dest: str | Path, *, c_like: bool = False, graph: bool = False) -> Path:
    """Write the plugin package for ``name`` into ``dest/<name>-sdk-plugin``; return it.

    Everything is written under ``dest`` (created if missing), into a temporary directory
    renamed into place at the end: a failure leaves nothing behind."""
    if c_like and graph:
        raise ValueError("choose one of --c-like (kernel-level C) and --graph (graph-level)")
    check_name(name)
    if not str(dest).strip():
        raise ValueError("the destination directory (--dest) is empty: name a directory")
    dest = Path(dest)
    if dest.exists() and not dest.is_dir():
        raise NotADirectoryError(f"{dest} is not a directory: choose a directory for --dest")
    dist = f"{name.replace('_', '-')}-sdk-plugin"
    root = dest / dist
    if root.exists() or root.is_symlink():
        raise FileExistsError(f"{root} exists; remove it or choose another destination")
    flavor = "c_like" if c_like else "graph" if graph else "fallback"
    files = {
        Path("pyproject.toml"): "common/pyproject.toml.tmpl",
        Path("README.md"): "common/README_graph.md.tmpl" if graph else "common/README.md.tmpl",
    }
    for tmpl in sorted((TEMPLATES / flavor).glob("*.tmpl")):
        files[Path(module_name(name)) / tmpl.name.removesuffix(".tmpl")] = f"{flavor}/{tmpl.name}"
    dest.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=dest, prefix=".new-plugin-"))
    try:
        for rel, tmpl in files.items():
            text = (TEMPLATES / tmpl).read_text()
            text = text.replace("{{name}}", name).replace("{{module}}", module_name(name))
            text = text.replace("{{sdk_requirement}}", sdk_requirement())
            path = staging / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text.replace("{{dist}}", dist))
        staging.chmod(0o755)  # mkdtemp's is 0o700; the package is an ordinary directory
        staging.rename(root)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return root
