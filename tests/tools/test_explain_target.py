"""``python -m sdk explain TARGET``: MODULE:FUNCTION resolves from the current directory (as
``python -m`` imports), path/to/file.py:FUNCTION from a file; a target not found is one line
naming what was looked for."""

from __future__ import annotations

import re
import sys

import pytest

from sdk import cli
from sdk.tools import demo

MODELS = """
import torch
from helper_q import WIDTH  # a sibling module, as `python file.py` would import it


def tiny():
    return torch.nn.Linear(WIDTH, 2), (torch.randn(3, WIDTH),)


def doubled():
    return (lambda x: x * 2), (torch.randn(5),)
"""


@pytest.fixture
def project(tmp_path, monkeypatch):
    """tmp_path/models/models_q.py beside helper_q.py; neither directory on sys.path; the
    current directory tmp_path."""
    models = tmp_path / "models"
    models.mkdir()
    (models / "models_q.py").write_text(MODELS)
    (models / "helper_q.py").write_text("WIDTH = 4\n")
    (models / "uses_missing_q.py").write_text("import no_such_dependency_q\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    for name in ("models_q", "helper_q", "uses_missing_q"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    yield tmp_path
    for name in ("models_q", "helper_q", "uses_missing_q"):
        sys.modules.pop(name, None)


@pytest.mark.parametrize("spec", ["models/models_q.py:tiny", "{root}/models/models_q.py:tiny"])
def test_a_file_target_by_relative_or_absolute_path(project, spec):
    model, args = demo._target(spec.format(root=project))
    assert model(*args).shape == (3, 2)


def test_a_module_target_resolves_from_the_current_directory(project, monkeypatch):
    monkeypatch.chdir(project / "models")  # the `sdk` console script lacks it on sys.path
    model, args = demo._target("models_q:tiny")
    assert model(*args).shape == (3, 2)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            "models_q:tiny",
            "No module named 'models_q': looked for 'models_q' in the current directory ({root})",
        ),
        (
            "models/nope_q.py:tiny",
            "no file 'models/nope_q.py' (looked for {root}/models/nope_q.py)",
        ),
        ("models/uses_missing_q.py:f", "raised ModuleNotFoundError: No module named 'no_such_"),
        ("models/models_q.py", "is not MODULE:FUNCTION"),
    ],
)
def test_a_target_not_found_is_one_line_naming_what_was_tried(project, capsys, spec, message):
    assert cli.main(["explain", spec]) == 2
    err = capsys.readouterr().err
    assert message.format(root=project) in err, err
    assert len(err.strip().splitlines()) == 1, err


def test_explain_of_a_file_target(project, capsys):
    argv = ["explain", "models/models_q.py:doubled", "--inference", "--plugin", "cpu_cpp"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    # (graph numbers count up through the process)
    assert re.search(r"graph g\d+_inference \[inference\] by sdk:cpu_cpp", out), out
