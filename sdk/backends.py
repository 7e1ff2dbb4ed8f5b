"""Entry-point targets for ``torch_dynamo_backends``.

``"sdk:<name>" = "sdk.backends:<name>"`` in a wheel's pyproject makes
``torch.compile(backend="sdk:<name>")`` find the SDK plugin ``<name>``:
any attribute of this module is the backend of the plugin of that name.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    from sdk import backend

    return backend(name)
