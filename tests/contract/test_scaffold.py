"""``python -m sdk new-plugin``: the generated packages install (their entry points read through
importlib.metadata from a .dist-info, as pip leaves one), show in ``python -m sdk list``,
compile with fusion and training, and pass the conformance suite out of the box."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sdk.scaffold import generate
from tests import fresh
from tests.contract.test_conformance import counts, installed_as_wheel, summary

#: The issue's budget for the C-like scaffold plugin (its .py files), fusion, training and
#: the worked ``sdk_lower_op`` example included: under 200 lines.
MAX_C_LIKE_LINES = 200


def _install(tmp_path: Path, name: str, flag: str | None) -> dict[str, str]:
    """Generate plugin ``name`` (through the CLI with ``flag``, else ``generate()``), install
    it as a wheel would be and return the environment that sees it."""
    if flag is not None:  # through the CLI
        out = subprocess.run(
            [sys.executable, "-m", "sdk", "new-plugin", name, "--dest", str(tmp_path), flag],
            capture_output=True,
            text=True,
            check=True,
        )
        # the next step the CLI suggests: the conformance suite, kernel- and graph-level alike
        assert f"python -m sdk conformance {name}" in out.stdout, out.stdout
        assert "fallback=False and debug=True" in out.stdout, out.stdout
    else:
        generate(name, tmp_path)
    root = tmp_path / f"{name}-sdk-plugin"
    site = tmp_path / "site"
    installed_as_wheel(
        site,
        f"{name}-sdk-plugin",
        "0.1.0",
        f"[sdk.plugins]\n{name} = {name}_sdk_plugin\n\n"
        f"[torch_dynamo_backends]\nsdk:{name} = sdk.backends:{name}\n",
    )
    # the entry points written match those of the generated pyproject.toml
    assert f'{name} = "{name}_sdk_plugin"' in (root / "pyproject.toml").read_text()
    return {
        **fresh.one_thread(),
        "PYTHONPATH": os.pathsep.join([str(site), str(root)]),
        "SDK_CACHE_DIR": str(tmp_path / "cache"),
    }


def _run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return fresh.run([sys.executable, *args], env=env, cwd=cwd, timeout=600)


def test_c_like_plugin_is_small_and_the_guide_states_its_size(tmp_path):
    """The ``--c-like`` plugin stays small, and the vendor guide states its real size (issue
    41: the README and the guide once gave two other numbers)."""
    root = generate("tiny", tmp_path, c_like=True)
    lines = sum(len(p.read_text().splitlines()) for p in (root / "tiny_sdk_plugin").glob("*.py"))
    assert lines < MAX_C_LIKE_LINES, lines
    guide = (Path(__file__).resolve().parents[2] / "docs" / "vendor-guide.md").read_text()
    bullet = guide.split("* **`--c-like`**", 1)[1].split("\n* ", 1)[0]
    stated = [int(n) for n in re.findall(r"(\d+)\s+lines", bullet)]
    assert stated == [lines], (
        f"docs/vendor-guide.md's --c-like bullet states {stated} line(s); python -m sdk "
        f"new-plugin --c-like generates {lines} lines of Python: write that number there"
    )
    for doc in ("README.md", "docs/user-guide.md"):
        text = (Path(__file__).resolve().parents[2] / doc).read_text()
        for m in re.finditer(r"(\d+)[ -]lines?", text):
            around = text[max(0, m.start() - 200) : m.end() + 200]
            assert "c-like" not in around and "scaffold" not in around, (
                f"{doc} states a scaffold size ({m.group(0)}); state it in the vendor "
                "guide's --c-like bullet only, which this test checks"
            )
    text = "\n".join(p.read_text() for p in (root / "tiny_sdk_plugin").glob("*.py"))
    assert "sdk.core" not in text, "a plugin imports only the public sdk API"


def test_vendor_guide_walks_through_every_hook():
    """docs/vendor-guide.md lists the hooks in the order a compile calls them: all of them."""
    import sdk.hookspecs

    guide = (Path(__file__).resolve().parents[2] / "docs" / "vendor-guide.md").read_text()
    order = guide.split("## The hooks, in the order a compile calls them", 1)[1]
    order = order.split("\n## ", 1)[0]
    hooks = [n for n in dir(sdk.hookspecs) if n.startswith("sdk_")]
    missing = [h for h in hooks if f"`{h}(" not in order]
    assert not missing, missing


def test_bad_names_are_refused(tmp_path):
    for bad in ("Acme", "acme-npu", "class", "9x"):
        with pytest.raises(ValueError, match="lower-case Python identifier"):
            generate(bad, tmp_path)
    generate("ok", tmp_path)
    with pytest.raises(FileExistsError):
        generate("ok", tmp_path)


def _new_plugin(args: list[str], capsys) -> tuple[int, str]:
    """``python -m sdk new-plugin ARGS`` in this process: (exit status, stderr). An exception
    escaping ``main()`` fails the test, as a traceback would have."""
    from sdk import cli

    rc = cli.main(["new-plugin", *args])
    return rc, capsys.readouterr().err


@pytest.mark.parametrize(
    "name",
    ["a" * 120, "a" * 250, "acm\u00e9", "_acme", "x" * 41],
    ids=["120", "250", "e", "_", "41"],
)
def test_a_bad_name_is_one_line_with_the_rule_and_writes_nothing(
    name, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    dest = tmp_path / "dest"
    rc, err = _new_plugin([name, "--dest", str(dest)], capsys)
    assert rc == 2 and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert "lower-case Python identifier of 1 to 40 ASCII letters" in err, err
    assert sorted(tmp_path.iterdir()) == [], "nothing is written, in --dest or elsewhere"


def test_output_goes_under_dest_only(tmp_path, capsys, monkeypatch):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    rc, err = _new_plugin(["x" * 40, "--dest", str(tmp_path / "a" / "b"), "--c-like"], capsys)
    assert rc == 0, err
    assert [p.name for p in (tmp_path / "a" / "b").iterdir()] == [f"{'x' * 40}-sdk-plugin"]
    assert list(cwd.iterdir()) == []
    # an empty --dest is not the working directory
    rc, err = _new_plugin(["acme", "--dest", ""], capsys)
    assert rc == 2 and "--dest" in err and "Traceback" not in err, err
    assert list(cwd.iterdir()) == []


def test_dest_that_is_a_file_or_taken_is_one_line(tmp_path, capsys):
    afile = tmp_path / "file"
    afile.write_text("x")
    for dest in (afile, afile / "sub"):
        rc, err = _new_plugin(["acme", "--dest", str(dest)], capsys)
        assert rc == 2 and len(err.strip().splitlines()) == 1 and str(afile) in err, err
    assert afile.read_text() == "x"
    generate("acme", tmp_path)
    rc, err = _new_plugin(["acme", "--dest", str(tmp_path)], capsys)
    assert rc == 2 and "exists" in err and "Traceback" not in err, err


def test_a_failed_write_leaves_nothing_behind(tmp_path, monkeypatch):
    real = Path.write_text
    calls = []

    def failing(self, *args, **kwargs):
        calls.append(self)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", failing)
    with pytest.raises(OSError, match="No space"):
        generate("acme", tmp_path / "dest")
    assert list((tmp_path / "dest").iterdir()) == []


def _assert_listed_ok(name: str, env: dict[str, str], cwd: Path) -> None:
    """``python -m sdk list`` shows plugin ``name`` as usable ("ok")."""
    listing = _run(["-m", "sdk", "list"], env, cwd)
    assert any(
        ln.split()[:1] == [name] and ln.rstrip().endswith("ok")
        for ln in listing.stdout.splitlines()
    ), listing.stdout + listing.stderr


@pytest.mark.slow
def test_c_like_plugin_lists_fuses_trains_and_conforms(tmp_path):
    env = _install(tmp_path, "zeta", "--c-like")
    _assert_listed_ok("zeta", env, tmp_path)
    probe = textwrap.dedent("""
        import json, torch, sdk
        def f(x, w):
            return torch.softmax(torch.relu(x * w + 1.0), -1).sum()
        x, w = torch.randn(8, 40, requires_grad=True), torch.randn(40, requires_grad=True)
        r = sdk.explain(f, x, w, backend="sdk:zeta")
        got = torch.compile(f, backend="sdk:zeta")(x, w)
        gx, gw = torch.autograd.grad(got, [x, w])
        ex, ew = torch.autograd.grad(f(x, w), [x, w])
        torch.testing.assert_close(got, f(x, w))
        torch.testing.assert_close(gx, ex); torch.testing.assert_close(gw, ew)
        # the op table's integer, boolean and rounding entries, against eager (integer
        # division by constants: by a tensor, which may hold 0, it runs through ATen)
        def ints_probe(a, b, x):
            return (a // 7, a // -4, a % 5, a % -3, torch.fmod(a, -6), a.abs(),
                    torch.maximum(a, b), (a & b) | ~a,
                    (a > b) & (x > 0), (x * 3).to(torch.int32), a.amax(-1), a.argmin(-1),
                    (x > 0).any(-1), x.round(), x.sign(), torch.remainder(x, -0.7),
                    x.clamp(-0.5, 0.5).to(torch.bfloat16) * 3, x.isnan(), x.amax(-1))
        a, b = torch.randint(-50, 50, (6, 9)), torch.randint(1, 9, (6, 9))
        b = b * torch.where(torch.rand(6, 9) > 0.5, 1, -1)
        y = torch.randn(6, 9)
        y[0, 3] = float("nan")
        ints = sdk.explain(ints_probe, a, b, y, backend="sdk:zeta")
        assert len(ints.kernels) >= 1 and not ints.fallbacks, str(ints)
        for u, v in zip(torch.compile(ints_probe, backend="sdk:zeta")(a, b, y),
                        ints_probe(a, b, y)):
            torch.testing.assert_close(u, v, equal_nan=True)
        print(json.dumps({"kinds": [g.kind for g in r.graphs], "fallbacks": len(r.fallbacks),
                          "kernels": [[len(k.ops) for k in g.kernels] for g in r.graphs]}))
    """)
    out = _run(["-c", probe], env, tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.splitlines()[-1])
    assert got["kinds"] == ["forward", "backward"] and got["fallbacks"] == 0, got
    # fusion: the forward is one kernel per reduction chain at most, each holding several ops
    assert all(max(sizes) > 2 for sizes in got["kernels"]), got
    # four OpInfo ops here (pointwise, a reduction chain, an indirect load, the plugin's own
    # elu lowering): the built-in plugins run the quick set in test_conformance.py
    conf = _run(
        [
            "-m",
            "sdk",
            "conformance",
            "zeta",
            "--compare",
            "none",
            "--opinfo",
            "add,softmax,index_select,nn.functional.elu",
            # one sample, as the built-in plugins' run: tests/contract/test_conformance.py checks that
            # the kit compares more than the first
            "--samples",
            "1",
        ],
        env,
        tmp_path,
    )
    text = conf.stdout + conf.stderr
    assert conf.returncode == 0, text[-3000:]
    cells = summary(text)
    for check in (
        "opinfo fw float32",
        "opinfo fw bfloat16",
        "opinfo fw+bw float32",
        "opinfo fw+bw bfloat16",
        "fusion",
        "cache",
    ):
        passed, run = counts(cells[(check, "zeta")])
        assert passed == run > 0, (check, cells)
    made, passed = counts(cells[("opinfo passes in generated kernels", "zeta")])
    # the plugin's own C runs them all but index_select's 0-d sample, which the core's
    # lowering fails on for every plugin (a whole-graph fallback; cpu_cpp's count is the same)
    assert passed > 0 and made >= passed * 3 // 4, cells
    # render and build faults fall back, cpu_cpp takes over in a chain; the run-time fault is
    # the core's known gap
    assert cells[("faults", "zeta")] == "4/4", cells


@pytest.mark.slow
def test_hook_skeleton_plugin_lists_and_conforms(tmp_path):
    env = _install(tmp_path, "eta", None)
    conf = _run(
        [
            "-m",
            "sdk",
            "conformance",
            "eta",
            "--compare",
            "none",
            "--opinfo",
            "add",
            "--samples",
            "1",
        ],
        env,
        tmp_path,
    )
    text = conf.stdout + conf.stderr
    assert conf.returncode == 0, text[-3000:]
    cells = summary(text)
    assert cells[("opinfo fw float32", "eta")] == "1/1", cells
    assert cells[("fusion", "eta")] == "0/0, 3 skipped", cells  # renders no kernels: says so
    assert cells[("faults", "eta")] == "0/0, 4 skipped", cells


def test_graph_plugin_is_clean_and_public(tmp_path):
    """The graph-level scaffold passes the team's ruff config and imports only ``sdk``."""
    root = generate("gamma", tmp_path, graph=True)
    text = (root / "gamma_sdk_plugin" / "__init__.py").read_text()
    assert "sdk.core" not in text and "HOOK_API = 3" in text
    ruff = [sys.executable, "-m", "ruff"]
    config = ["--config", str(Path(__file__).resolve().parents[2] / "pyproject.toml")]
    for cmd in (["check", *config], ["format", "--check", *config]):
        out = subprocess.run([*ruff, *cmd, str(root)], capture_output=True, text=True)
        assert out.returncode == 0, out.stdout + out.stderr
    with pytest.raises(ValueError, match="choose one"):
        generate("delta", tmp_path, c_like=True, graph=True)


@pytest.mark.slow
def test_graph_plugin_compiles_partitions_in_a_chain(tmp_path):
    """``new-plugin --graph``: installed, ``sdk:theta`` compiles an MLP forward and backward
    with a chain to cpu_cpp; theta owns the pointwise partitions, cpu_cpp the rest, the
    refusals carry theta's reasons, and the results match eager on fresh inputs."""
    env = _install(tmp_path, "theta", "--graph")
    _assert_listed_ok("theta", env, tmp_path)
    probe = textwrap.dedent("""
        import json, torch, sdk
        def f(x, w):
            return (torch.tanh(x @ w) * 2.0 + 1.0).softmax(-1)
        opts = {"chain": ["cpu_cpp"], "min_partition_size": 1}
        backend = sdk.backend("theta", **opts)
        x, w = torch.randn(8, 16, requires_grad=True), torch.randn(16, 16, requires_grad=True)
        r = sdk.explain(f, x, w, backend=backend)
        compiled = torch.compile(f, backend=backend)
        for _ in range(2):
            x = torch.randn(8, 16, requires_grad=True)
            w = torch.randn(16, 16, requires_grad=True)
            got = compiled(x, w)
            gx, gw = torch.autograd.grad(got.square().sum(), [x, w])
            want = f(x, w)
            ex, ew = torch.autograd.grad(want.square().sum(), [x, w])
            torch.testing.assert_close(got, want)
            torch.testing.assert_close(gx, ex); torch.testing.assert_close(gw, ew)
        graphs = [g for g in r.graphs if g.partitions]
        print(json.dumps({
            "kinds": [g.kind for g in graphs],
            "owners": sorted({p.compiled_by for g in graphs for p in g.partitions}),
            "fallbacks": len(r.fallbacks),
            "refusals": sorted({why for g in graphs for pl in g.placements
                                for who, why in pl.refusals if who == "theta"}),
        }))
    """)
    out = _run(["-c", probe], env, tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.splitlines()[-1])
    assert got["kinds"] == ["forward", "backward"], got
    assert got["owners"] == ["cpu_cpp", "theta"] and got["fallbacks"] == 0, got
    assert any("not in CLAIMED" in why for why in got["refusals"]), got


def test_generated_plugin_pins_this_sdk_up_to_its_next_major_version(tmp_path):
    """The generated pyproject depends on ``torch-backend-sdk>=<this version>,<next major>``:
    pip then refuses an SDK too old for the plugin's hook API (and the ``sdk`` API the
    scaffold uses) instead of the registry finding out at load time."""
    tomllib = pytest.importorskip("tomllib")
    from packaging.requirements import Requirement
    from packaging.version import Version

    import sdk

    repo = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    assert repo["project"]["version"] == sdk.__version__, "pyproject.toml and sdk.__version__"
    this = Version(sdk.__version__)
    for name, flavor in (("pina", {}), ("pinb", {"c_like": True}), ("pinc", {"graph": True})):
        root = generate(name, tmp_path, **flavor)
        project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
        (req,) = [Requirement(d) for d in project["dependencies"]]
        assert req.name == "torch-backend-sdk", req
        assert {str(s) for s in req.specifier} == {f">={this}", f"<{this.major + 1}"}, req
        assert req.specifier.contains(this), req
        assert req.specifier.contains(f"{this.major}.{this.minor + 1}.0"), req
        assert not req.specifier.contains(f"{this.major + 1}.0"), req


def test_scaffold_readmes_send_every_plugin_to_conformance_and_a_strict_bring_up(tmp_path):
    """Both generated READMEs: the conformance suite (graph-level plugins too, issue 41) and
    bringing a plugin up with ``fallback=False`` and ``debug=True``; the guide agrees."""
    for name, flavor in (("rhoa", {}), ("rhob", {"graph": True})):
        text = (generate(name, tmp_path, **flavor) / "README.md").read_text()
        assert f"python -m sdk conformance {name}" in text, text
        assert "kernel-level plugins only" not in text, text
        assert "fallback=False" in text and "debug=True" in text, text
    guide = (Path(__file__).resolve().parents[2] / "docs" / "vendor-guide.md").read_text()
    bullet = guide.split("* **`--graph`**", 1)[1].split("\n\n", 1)[0]
    assert "kernel-level plugins only" not in bullet and "runs on it" in bullet, bullet
