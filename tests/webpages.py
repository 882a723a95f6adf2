"""Helpers of the web view's tests: `prunestore serve` in a process of its own, and Chromium driving it."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

CHROMIUM_ENV = "PRUNESTORE_TEST_CHROMIUM"  # set by CI: then a missing browser fails instead of skipping
SCREENSHOTS_ENV = "PRUNESTORE_SCREENSHOTS"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def serving(url: str, *args: str):
    """Run ``prunestore serve`` on `url` until the block ends; yields (base address, the process)."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "prunestore.cli", "--db", url, "serve", "--port", str(port), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(base + "/", timeout=5).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    assert process.stderr is not None
                    raise AssertionError(f"prunestore serve did not start: {process.stderr.read()}") from None
                time.sleep(0.1)
        yield base, process
    finally:
        process.terminate()
        process.wait(timeout=30)


def chromium():
    """A headless Chromium under Selenium, with the browser and driver Debian installs."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary = os.environ.get(CHROMIUM_ENV) or shutil.which("chromium")
    driver = shutil.which("chromedriver")
    if not binary or not driver:
        if os.environ.get(CHROMIUM_ENV):
            raise AssertionError(f"{CHROMIUM_ENV} is set but chromium or chromedriver is missing")
        pytest.skip(
            f"needs Debian's chromium and chromium-driver (apt install chromium chromium-driver); "
            f"CI sets {CHROMIUM_ENV}"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1000"):
        options.add_argument(argument)
    return webdriver.Chrome(service=Service(driver), options=options)


@contextmanager
def navigation(browser):
    """Wait, after the block, until the next page has replaced the one open before it."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    page = browser.find_element(By.TAG_NAME, "main")
    yield
    # Asked while the page is being replaced, chromedriver may fail with an "inspector error" instead of
    # saying the element is stale: ask again (a page that is never replaced still times out).
    WebDriverWait(browser, 30, ignored_exceptions=[WebDriverException]).until(expected_conditions.staleness_of(page))


def follow(browser, link) -> None:
    """Click a link and wait for the page it leads to."""
    with navigation(browser):
        link.click()


def screenshot_dir(tmp_path_factory) -> Path:
    """Where the run leaves a screenshot of each page: $PRUNESTORE_SCREENSHOTS, or the run's temporary folder."""
    where = Path(os.environ.get(SCREENSHOTS_ENV) or tmp_path_factory.mktemp("screenshots"))
    where.mkdir(parents=True, exist_ok=True)
    return where
