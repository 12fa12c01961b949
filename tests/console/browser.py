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
async def launched() -> AsyncIterator[Any]:
    """A headless Chromium browser, for :func:`chromium`'s contexts (one launch shared by
    several tests costs less than a launch per context)."""
    from playwright.async_api import async_playwright

    path = require_chromium()
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=path, args=["--no-sandbox"])
        try:
            yield browser
        finally:
            await browser.close()


@asynccontextmanager
async def chromium(browser: Any = None, **context: Any) -> AsyncIterator[Any]:
    """A headless Chromium browser context (``context``: new_context's arguments), in
    ``browser`` (from :func:`launched`) or in a browser of its own."""
    if browser is None:
        async with launched() as own, chromium(own, **context) as ctx:
            yield ctx
        return
    ctx = await browser.new_context(**context)
    try:
        yield ctx
    finally:
        await ctx.close()
