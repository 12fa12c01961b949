"""Driving Debian's Chromium from the tests (Playwright for Python, no browser download).

:func:`require_chromium` skips a test when no Chromium is installed, with the reason,
except under CI=true, where that fails it: CI must never pass by skipping these tests.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def require_chromium() -> str:
    path = chromium_path()
    problem = None
    if path is None:
        problem = "no chromium on PATH (install Debian's chromium package)"
    else:
        try:
            import playwright.async_api  # noqa: F401
        except ImportError as exc:
            problem = f"playwright cannot be imported ({exc}); install '.[dev]'"
    if problem is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{problem} (CI=true: the browser tests must run)", pytrace=False)
        pytest.skip(problem)
    assert path is not None
    return path


@asynccontextmanager
async def chromium(**context: Any) -> AsyncIterator[Any]:
    """A headless Chromium browser context (``context``: new_context's arguments)."""
    from playwright.async_api import async_playwright

    path = require_chromium()
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=path, args=["--no-sandbox"])
        try:
            ctx = await browser.new_context(**context)
            try:
                yield ctx
            finally:
                await ctx.close()
        finally:
            await browser.close()
