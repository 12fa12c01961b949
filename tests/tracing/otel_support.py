"""For the tracing tests: OpenTelemetry is a dev dependency (the otel extra). Without it
the tests skip, saying why; under CI=true they fail instead (CI installs the extra)."""

from __future__ import annotations

import importlib.util
import os

import pytest


def require_otel() -> None:
    missing = [
        name
        for name in (
            "opentelemetry.sdk",
            "opentelemetry.exporter.otlp.proto.http",
            "opentelemetry.proto",
        )
        if importlib.util.find_spec(name.split(".")[0]) is None or _missing(name)
    ]
    if not missing:
        return
    reason = f"OpenTelemetry is not installed ({', '.join(missing)}): pip install -e '.[dev,otel]'"
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def _missing(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is None
    except ModuleNotFoundError:
        return True
