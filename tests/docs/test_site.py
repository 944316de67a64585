"""The documentation site, built strictly and checked in a headless browser (Debian's chromium).

The site is built into a temporary directory, served on 127.0.0.1, and every page is opened in
headless Chromium (through chromedriver): each page loads with no console error, every picture
on it renders, search finds a page, the dark-mode toggle switches the scheme, and code blocks
carry a copy button. Chromium and chromedriver come from Debian's packages (``chromium``,
``chromium-driver``); without them this test fails, naming them.
"""

from __future__ import annotations

import functools
import http.server
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[str]]]:
    out = tmp_path_factory.mktemp("site")
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        env={"NO_MKDOCS_2_WARNING": "1", **dict(__import__("os").environ)},
    )
    assert build.returncode == 0, build.stdout + build.stderr
    pages = sorted(str(p.relative_to(out).parent).replace(".", "") for p in out.glob("**/index.html"))
    handler = functools.partial(_QuietHandler, directory=str(out))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", pages
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        assert Path(path).exists(), f"{path} is missing: install Debian's {package} (apt-get install {package})"
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    profile = tempfile.mkdtemp(prefix="safeconsumer-chromium-")
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--window-size=1280,900",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _errors(driver: Any) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def test_every_page_loads_with_its_pictures_and_no_console_error(site: tuple[str, list[str]], browser: Any) -> None:
    base, pages = site
    assert len(pages) >= 15 and "recipes" in pages, pages
    pictures: set[tuple[str, str]] = set()
    for page in pages:
        browser.get(base + (page + "/" if page else ""))
        images = browser.execute_script(
            "return Array.from(document.images).map(i => [i.getAttribute('src'), i.complete && i.naturalWidth > 0])"
        )
        broken = [src for src, ok in images if not ok]
        assert not broken, f"{page}: pictures that did not render: {broken}"
        for src, _ in images:
            if src.endswith(".svg") and "/img/" in src:
                pictures.add((page, src.rsplit("/", 1)[-1]))
        errors = _errors(browser)  # reading the log empties it: read it once
        assert not errors, f"{page}: console errors: {errors}"
    # Each picture on the page that explains it.
    assert {
        ("pause-and-delivery", "pause-model.svg"),
        ("pause-and-delivery", "delivery-timeline.svg"),
        ("lifecycle", "delivery-timeline.svg"),
        ("keepalive", "keepalive-cycle.svg"),
        ("performance", "bench-per-record.svg"),
        ("performance", "bench-ratios.svg"),
    } <= pictures, pictures


def test_search_dark_mode_and_code_copy_work(site: tuple[str, list[str]], browser: Any) -> None:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    base, _ = site
    browser.get(base + "recipes/")
    # Search results are re-rendered as the index answers: an element read while that happens is
    # stale, and the condition is simply tried again.
    wait = WebDriverWait(browser, 20, ignored_exceptions=(StaleElementReferenceException,))
    # Code blocks carry Material's copy button.
    wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "pre .md-code__button, button.md-clipboard")))
    # The dark-mode toggle switches the scheme.
    before = browser.execute_script("return document.body.getAttribute('data-md-color-scheme')")
    toggle = next(
        e for e in browser.find_elements(By.CSS_SELECTOR, "form[data-md-component=palette] label") if e.is_displayed()
    )
    toggle.click()
    after = browser.execute_script("return document.body.getAttribute('data-md-color-scheme')")
    assert {before, after} == {"default", "slate"}, (before, after)
    # Search (an index built with the site, no network) finds the keepalive page.
    field = wait.until(ec.element_to_be_clickable((By.CSS_SELECTOR, "input.md-search__input")))
    field.send_keys("keepalive_max")
    wait.until(
        lambda d: any(
            "keepalive" in (a.get_attribute("href") or "")
            for a in d.find_elements(By.CSS_SELECTOR, ".md-search-result__link")
        )
    )
    errors = _errors(browser)
    assert not errors, errors
