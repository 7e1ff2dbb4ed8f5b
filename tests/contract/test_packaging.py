"""The SDK as users get it: the wheel's contents, a vendor wheel beside it, the editable install.

The wheels are built once per session from a snapshot of the working tree
(``python -m build --wheel --no-isolation``) and installed into one virtual
environment, which every test here reuses.

Why the environment's own SDK cannot leak into that venv: the venv is made with
``--system-site-packages`` (so torch and pluggy need no second install) and the
wheels are installed into its own site-packages, which comes first on
``sys.path``. The base environment's *editable* install of this checkout is a
meta-path finder appended to ``sys.meta_path`` by a ``.pth`` file; it runs after
the standard ``PathFinder`` and only answers for names the venv cannot find.
That last part could hide a module missing from the wheel (it would be served
from the checkout), so the probe asserts that *every* ``sdk`` module it imported
came from the venv. ``importlib.metadata`` keeps the first distribution of a name
on ``sys.path``, so the venv's entry points win over the base's too. The probe
runs with the working directory outside the checkout, so ``''`` on ``sys.path``
cannot find ``./sdk`` either.
"""

from __future__ import annotations

import configparser
import json
import os
import shutil
import site
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ACME = Path("examples") / "acme_vendor"

pytestmark = pytest.mark.slow

#: setuptools builds wheels itself from 70.1 on; older ones need the ``wheel`` package.
MIN_SETUPTOOLS = (70, 1)


def _run(
    cmd: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [str(c) for c in cmd],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(
            f"{' '.join(map(str, cmd))} exited {proc.returncode}\n"
            f"--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-4000:]}"
        )
    return proc


def _clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SDK_", "PYTHON", "PIP_")) and k != "TRITON_INTERPRET"
    }
    env.update(extra)
    return env


def _check_setuptools() -> None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = tuple(int(p) for p in version("setuptools").split(".")[:2])
    except PackageNotFoundError:
        found = None
    if found is None or found < MIN_SETUPTOOLS:
        try:
            version("wheel")
            return
        except PackageNotFoundError:
            pass
        pytest.fail(
            f"building wheels without isolation needs setuptools>="
            f"{'.'.join(map(str, MIN_SETUPTOOLS))} (found {found}) or the 'wheel' "
            f"package; pip install -U setuptools"
        )


@pytest.fixture(scope="session")
def source_tree(tmp_path_factory) -> Path:
    """A snapshot of the working tree, so the build never writes into the checkout."""
    src = tmp_path_factory.mktemp("src") / "torch-backend-sdk"
    shutil.copytree(
        ROOT,
        src,
        ignore=shutil.ignore_patterns(
            ".git",
            "build",
            "dist",
            "*.egg-info",
            "__pycache__",
            ".venv",
            ".pytest_cache",
            ".whl",
            ".gl",
        ),
    )
    return src


@pytest.fixture(scope="session")
def wheels(source_tree, tmp_path_factory) -> dict[str, Path]:
    """The SDK's wheel and the example vendor's, built once per session."""
    _check_setuptools()
    out = tmp_path_factory.mktemp("wheels")
    built = {}
    for key, project in (("sdk", source_tree), ("acme", source_tree / ACME)):
        dest = out / key
        # --skip-dependency-check: the build requirements list 'wheel', which setuptools
        # >= 70.1 no longer needs (checked above), and nothing may be downloaded here
        _run(
            [
                sys.executable,
                "-m",
                "build",
                "--wheel",
                "--no-isolation",
                "--skip-dependency-check",
                "--outdir",
                dest,
                project,
            ],
            cwd=project,
            env=_clean_env(),
        )
        [built[key]] = dest.glob("*.whl")
    return built


@pytest.fixture(scope="session")
def venv(wheels, tmp_path_factory) -> Path:
    """A venv with both wheels installed; torch and pluggy come from the base environment."""
    root = tmp_path_factory.mktemp("venv") / "env"
    _run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", root],
        cwd=root.parent,
    )
    python = _venv_python(root)
    _see_the_outer_venv(python)
    # pip itself comes from the base environment; it installs into the running venv.
    # --ignore-installed: the base's editable install has the same version
    _run(
        [
            python,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-index",
            "--ignore-installed",
            "--disable-pip-version-check",
            "--no-warn-script-location",
            wheels["sdk"],
            wheels["acme"],
        ],
        cwd=root.parent,
        env=_clean_env(),
    )
    return root


def _see_the_outer_venv(python: Path) -> None:
    """Run from a venv (the usual set-up), ``--system-site-packages`` gives the new venv the
    *base* interpreter's packages, not this venv's torch and pluggy: name this one's site
    directories in a ``.pth`` file of the new venv. They come after its own site-packages, so
    what is installed there wins, and a ``.pth`` file in them (this venv's editable SDK) is
    not run: only site directories' ``.pth`` files are."""
    if sys.prefix == sys.base_prefix:
        return
    out = subprocess.run(
        [python, "-c", "import site; print(site.getsitepackages()[0])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    outer = [p for p in site.getsitepackages() if os.path.isdir(p)]
    Path(out, "outer-venv.pth").write_text("".join(p + "\n" for p in outer))


def _venv_python(root: Path) -> Path:
    return root / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


PROBE = textwrap.dedent("""
    import importlib.metadata as md
    import json
    import sys

    import torch

    import sdk

    out = {"prefix": sys.prefix, "sdk_file": sdk.__file__}
    out["sdk_dist"] = str(md.distribution("torch-backend-sdk").locate_file(""))
    out["plugin_eps"] = sorted(ep.name for ep in md.entry_points(group="sdk.plugins"))
    out["backend_eps"] = sorted(ep.name for ep in md.entry_points(group="torch_dynamo_backends")
                                if ep.name.startswith("sdk:"))
    out["plugins"] = sdk.list_plugins()


    def fn(x):
        return torch.sin(x) * 2 + torch.relu(x)


    torch.manual_seed(0)
    compiled = torch.compile(fn, backend="sdk:acme")
    out["max_error"] = max(float((compiled(x) - fn(x)).abs().max())
                           for x in (torch.randn(17) for _ in range(3)))
    report = sdk.explain(fn, torch.randn(17), backend="sdk:acme")
    out["graphs"] = [(g.kind, g.plugin) for g in report.graphs]
    out["explain_compiled"] = report.compiled_now
    out["fallbacks"] = {f.op: f.reason for f in report.fallbacks}

    import acme_sdk_plugin

    out["acme_file"] = acme_sdk_plugin.__file__
    out["acme_graphs"] = dict(acme_sdk_plugin.graphs_compiled)
    out["sdk_modules"] = {name: getattr(m, "__file__", None) for name, m in sys.modules.items()
                          if name == "sdk" or name.startswith("sdk.")}
    print("PROBE" + json.dumps(out))
""")


@pytest.fixture(scope="session")
def probe(venv, tmp_path_factory) -> dict:
    """What the venv's interpreter sees, and what compiling with ``sdk:acme`` did there."""
    work = tmp_path_factory.mktemp("probe")
    script = work / "probe.py"
    script.write_text(PROBE)
    proc = _run([_venv_python(venv), script], cwd=work, env=_clean_env())
    [line] = [x for x in proc.stdout.splitlines() if x.startswith("PROBE")]
    return json.loads(line[len("PROBE") :])


def _inside(path: str | None, root: Path) -> bool:
    return path is not None and Path(path).resolve().is_relative_to(root.resolve())


# ---------------------------------------------------------------------------
# the wheels' contents
# ---------------------------------------------------------------------------


def _entry_points(whl: zipfile.ZipFile) -> configparser.ConfigParser:
    [name] = [n for n in whl.namelist() if n.endswith(".dist-info/entry_points.txt")]
    parser = configparser.ConfigParser(delimiters=("=",))
    parser.optionxform = str  # keep "sdk:cpu_cpp" as written
    parser.read_string(whl.read(name).decode())
    return parser


def test_sdk_wheel_holds_only_the_sdk_package(wheels):
    with zipfile.ZipFile(wheels["sdk"]) as whl:
        names = whl.namelist()
    top = {n.split("/", 1)[0] for n in names}
    assert top == {"sdk", "torch_backend_sdk-0.6.0.dist-info"}, top
    for expected in (
        "sdk/__init__.py",
        "sdk/hookspecs.py",
        "sdk/core/__init__.py",
        "sdk/core/pipeline.py",
        "sdk/core/registry.py",
        "sdk/core/adapters/torch_private.py",
        "sdk/plugins/cpu_cpp/__init__.py",
        "sdk/plugins/cuda_triton/__init__.py",
        "sdk/plugins/cudagraphs/__init__.py",
        "sdk/tools/bench.py",
    ):
        assert expected in names


def test_sdk_wheel_contains_every_module_of_the_tree(wheels, source_tree):
    """A package missing from pyproject's explicit list would ship without its modules, and
    a C or C++ source the package builds at run time (the runner, cuda_triton's shim)
    without its package-data entry."""
    with zipfile.ZipFile(wheels["sdk"]) as whl:
        names = set(whl.namelist())
    expected = set()
    for top, prefix in (
        ("sdk", "sdk"),
        ("core", "sdk/core"),
        ("plugins", "sdk/plugins"),
        ("tools", "sdk/tools"),
    ):
        for pattern in ("*.py", "*.c", "*.cpp"):
            for path in (source_tree / top).rglob(pattern):
                expected.add(f"{prefix}/{path.relative_to(source_tree / top).as_posix()}")
    assert "sdk/plugins/cuda_triton/shim.c" in expected
    missing = sorted(expected - names)
    assert not missing, (
        f"files not in the wheel (add their packages to [tool.setuptools] packages, or the "
        f"file to [tool.setuptools.package-data], in pyproject.toml): {missing}"
    )


def test_sdk_wheel_entry_points(wheels):
    with zipfile.ZipFile(wheels["sdk"]) as whl:
        eps = _entry_points(whl)
    assert dict(eps["sdk.plugins"]) == {
        "cpu_cpp": "sdk.plugins.cpu_cpp",
        "cuda_triton": "sdk.plugins.cuda_triton",
        "cudagraphs": "sdk.plugins.cudagraphs",
    }
    assert dict(eps["torch_dynamo_backends"]) == {
        "sdk:cpu_cpp": "sdk.backends:cpu_cpp",
        "sdk:cuda_triton": "sdk.backends:cuda_triton",
    }
    assert dict(eps["console_scripts"]) == {"sdk": "sdk.cli:main"}
    # pytest --sdk-plugin=NAME: the conformance suite
    assert dict(eps["pytest11"]) == {"sdk_conformance": "sdk.conformance.pytest_plugin"}


def test_sdk_wheel_holds_the_scaffold_templates(wheels, source_tree):
    """python -m sdk new-plugin reads its templates from the installed package."""
    with zipfile.ZipFile(wheels["sdk"]) as whl:
        names = set(whl.namelist())
    templates = {
        f"sdk/{p.relative_to(source_tree / 'sdk').as_posix()}"
        for p in (source_tree / "sdk" / "scaffold" / "templates").rglob("*.tmpl")
    }
    assert templates and templates <= names, sorted(templates - names)


def test_acme_wheel_is_a_plain_vendor_package(wheels):
    with zipfile.ZipFile(wheels["acme"]) as whl:
        names = whl.namelist()
        eps = _entry_points(whl)
        [meta] = [n for n in names if n.endswith(".dist-info/METADATA")]
        metadata = whl.read(meta).decode()
    assert {n.split("/", 1)[0] for n in names} == {
        "acme_sdk_plugin",
        "acme_sdk_plugin-0.1.0.dist-info",
    }
    assert dict(eps["sdk.plugins"]) == {"acme": "acme_sdk_plugin"}
    assert dict(eps["torch_dynamo_backends"]) == {"sdk:acme": "sdk.backends:acme"}
    assert "Requires-Dist: torch-backend-sdk" in metadata


def test_acme_imports_only_the_public_sdk():
    source = (ROOT / ACME / "acme_sdk_plugin" / "__init__.py").read_text()
    imports = [
        line.split()[1] for line in source.splitlines() if line.startswith(("import ", "from "))
    ]
    assert all(not name.startswith("sdk.") for name in imports), imports


# ---------------------------------------------------------------------------
# installed from the wheels, in a fresh venv
# ---------------------------------------------------------------------------


def test_venv_imports_the_wheel_not_the_checkout(probe, venv):
    assert _inside(probe["prefix"], venv)
    assert _inside(probe["sdk_file"], venv), probe["sdk_file"]
    assert _inside(probe["sdk_dist"], venv), probe["sdk_dist"]
    assert _inside(probe["acme_file"], venv), probe["acme_file"]
    assert {"sdk.core", "sdk.core.pipeline", "sdk.plugins.cpu_cpp"} <= set(probe["sdk_modules"])
    strays = {
        name: f
        for name, f in probe["sdk_modules"].items()
        if f is not None and not _inside(f, venv)
    }
    assert not strays, f"served from outside the venv (the editable finder?): {strays}"


def test_venv_discovers_each_plugin_once(probe):
    """The wheels' plugins, each once (plugins installed in the environment the venv sees
    through its system site packages, such as CI's IREE plugin, may be listed beside them)."""
    ours = ["acme", "cpu_cpp", "cuda_triton", "cudagraphs"]
    eps, backends = probe["plugin_eps"], probe["backend_eps"]
    assert sorted(set(eps)) == sorted(eps) and set(ours) <= set(eps), eps
    assert sorted(set(backends)) == sorted(backends), backends
    assert {"sdk:acme", "sdk:cpu_cpp", "sdk:cuda_triton"} <= set(backends), backends
    assert {b.removeprefix("sdk:") for b in backends} <= set(eps), backends
    rows = {r["name"]: r for r in probe["plugins"]}
    assert len(rows) == len(probe["plugins"]) == len(eps)
    assert rows["acme"]["distribution"] == "acme-sdk-plugin 0.1.0"
    assert rows["acme"]["status"] == "ok"
    assert rows["cpu_cpp"]["distribution"] == "torch-backend-sdk 0.6.0"


def test_venv_acme_backend_matches_eager(probe):
    assert probe["max_error"] <= 1e-6
    assert probe["graphs"] == [["inference", "acme"]]
    # the compile; explain reports its graph, compiled for those sizes, without another
    assert probe["acme_graphs"] == {"inference": 1}
    assert probe["explain_compiled"] is False
    assert set(probe["fallbacks"]) >= {"aten.sin.default"}


def test_venv_explain_shows_acme_refusal(probe):
    assert "Acme has no transcendental unit for sin" in probe["fallbacks"]["aten.sin.default"]


def test_venv_console_script_lists_acme(venv, tmp_path):
    script = venv / ("Scripts/sdk.exe" if os.name == "nt" else "bin/sdk")
    proc = _run([script, "list"], cwd=tmp_path, env=_clean_env())
    [line] = [x for x in proc.stdout.splitlines() if x.startswith("acme ")]
    assert "acme-sdk-plugin 0.1.0" in line and line.rstrip().endswith("ok")


# ---------------------------------------------------------------------------
# the editable install of this checkout (how .ci/run and contributors install)
# ---------------------------------------------------------------------------


def test_editable_install_serves_the_checkout(tmp_path):
    """Run outside the checkout, so only the editable finder can map sdk.core to core/."""
    code = textwrap.dedent("""
        import importlib.metadata as md, json
        import sdk, sdk.core, sdk.core.adapters.torch_private, sdk.plugins.cpu_cpp
        print(json.dumps({
            "sdk": sdk.__file__, "core": sdk.core.__file__,
            "adapters": sdk.core.adapters.torch_private.__file__,
            "cpu_cpp": sdk.plugins.cpu_cpp.__file__,
            "direct_url": md.distribution("torch-backend-sdk").read_text("direct_url.json"),
        }))
    """)
    proc = _run([sys.executable, "-c", code], cwd=tmp_path, env=_clean_env())
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    direct = json.loads(seen["direct_url"] or "{}")
    assert direct.get("dir_info", {}).get("editable") is True, (
        f"the SDK is not installed editable ({direct}); run pip install -e '.[test]'"
    )
    root = ROOT.resolve()
    assert Path(seen["sdk"]).resolve() == root / "sdk" / "__init__.py"
    assert Path(seen["core"]).resolve() == root / "core" / "__init__.py"
    assert Path(seen["adapters"]).resolve() == root / "core" / "adapters" / "torch_private.py"
    assert Path(seen["cpu_cpp"]).resolve() == root / "plugins" / "cpu_cpp" / "__init__.py"
