"""The status page in a real browser: Debian's headless Chromium driven by Selenium through Debian's
chromedriver (never Selenium Manager: nothing is downloaded). Runs triggered while the page is open appear
with the right outcomes without a reload, the filters work, hostile output stays text, nothing breaks the
Content-Security-Policy, and with JavaScript off the page still refreshes itself.

Skipped when chromium or chromedriver is missing, unless HOOKRUNNER_REQUIRE_BROWSER is set (.ci/run sets
it, and CI=true implies it): then that is a failure. HOOKRUNNER_SCREENSHOTS=DIR also writes the
screenshots to DIR (docs/ keeps the ones the README shows)."""

from __future__ import annotations

import os
import shutil
import struct
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_run_history import Admin, all_hooks, start, trigger
from test_serving import Server, python_hook

CHROMIUM = Path(os.environ.get("HOOKRUNNER_CHROMIUM", "/usr/bin/chromium"))
CHROMEDRIVER = Path(os.environ.get("HOOKRUNNER_CHROMEDRIVER", "/usr/bin/chromedriver"))
REQUIRED = bool(os.environ.get("HOOKRUNNER_REQUIRE_BROWSER")) or os.environ.get("CI") == "true"
HAVE_BROWSER = CHROMIUM.is_file() and CHROMEDRIVER.is_file()
if REQUIRED and not HAVE_BROWSER:
    raise RuntimeError(f"the browser tests must run here, but {CHROMIUM} or {CHROMEDRIVER} is missing")
pytestmark = pytest.mark.skipif(not HAVE_BROWSER, reason="Debian's chromium and chromium-driver are not installed")

if HAVE_BROWSER or REQUIRED:
    from selenium import webdriver
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.select import Select
    from selenium.webdriver.support.ui import WebDriverWait


@pytest.fixture
def no_selenium_manager(monkeypatch: pytest.MonkeyPatch) -> None:
    """Selenium must use the system chromedriver: Selenium Manager (which may download) must not run."""
    from selenium.webdriver.common import selenium_manager

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("Selenium Manager was asked to find a driver or browser")

    monkeypatch.setenv("SE_OFFLINE", "true")
    monkeypatch.setattr(selenium_manager.SeleniumManager, "binary_paths", refuse)


def browser(tmp_path: Path, javascript: bool = True) -> webdriver.Chrome:
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1100,720", "--no-first-run", "--disable-extensions",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(arg)
    if not javascript:
        options.add_experimental_option("prefs", {"profile.managed_default_content_settings.javascript": 2})
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(executable_path=str(CHROMEDRIVER), log_output=str(tmp_path / "chromedriver.log"))
    return webdriver.Chrome(options=options, service=service)


@pytest.fixture
def driver(tmp_path: Path, no_selenium_manager: None) -> Iterator[webdriver.Chrome]:
    chrome = browser(tmp_path)
    try:
        yield chrome
    finally:
        chrome.quit()


def outcome_badge(driver: webdriver.Chrome, hook: str) -> str:
    """The last outcome shown for `hook`, read in one script (the page replaces its content as it refreshes)."""
    return str(driver.execute_script(
        "const b = document.querySelector(`tr.hook[data-hook=\"${arguments[0]}\"] .badge`);"
        "return b ? b.textContent.trim() : '';", hook))


def strip_classes(driver: webdriver.Chrome, hook: str) -> list[str]:
    return list(driver.execute_script(
        "return [...document.querySelectorAll(`tr.hook[data-hook=\"${arguments[0]}\"] svg.strip rect.bar`)]"
        ".map(r => r.getAttribute('class'));", hook))


def wait_for(driver: webdriver.Chrome, check: object, timeout: float = 30) -> None:
    try:
        WebDriverWait(driver, timeout, poll_frequency=0.2).until(check)  # type: ignore[arg-type]
    except TimeoutException:
        raise AssertionError(driver.page_source[:4000]) from None


def save_screenshot(driver: webdriver.Chrome, tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    assert driver.save_screenshot(str(path))
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1100, 720) or width > 0 and height > 0
    target = os.environ.get("HOOKRUNNER_SCREENSHOTS")
    if target:
        shutil.copy(path, Path(target) / name)


def severe_console_messages(driver: webdriver.Chrome) -> list[str]:
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def test_runs_appear_live_with_their_outcomes(tmp_path: Path, servers: list[Server], driver: webdriver.Chrome) -> None:
    gate = tmp_path / "gate"
    server, admin = start(tmp_path, servers, all_hooks(gate), "-history-output", "4KiB")
    driver.get(f"http://127.0.0.1:{admin.port}/")
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, 'tr.hook[data-hook="ok"]'))
    assert outcome_badge(driver, "ok") == ""  # never run yet
    wait_for(driver, lambda d: d.execute_script("return document.documentElement.dataset.refresh") == "script")
    driver.execute_script("document.getElementById('content').dataset.first = 'yes'")

    # Triggered while the page is open: they show up without the test reloading anything.
    for hook, rid in (("ok", "ok-1"), ("fail", "fail-1"), ("slow", "slow-1"), ("hostile", "hostile-1")):
        assert trigger(server, hook, rid) == 200
    assert [trigger(server, "queue", f"queue-{n}") for n in (1, 2, 3)] == [200, 200, 429]
    gate.touch()
    for n in range(2, 5):
        trigger(server, "ok", f"ok-{n}")
    wait_for(driver, lambda d: outcome_badge(d, "ok") == "ok" and outcome_badge(d, "fail") == "failed (3)"
             and outcome_badge(d, "slow").startswith("timed out") and outcome_badge(d, "queue") == "refused"
             and sorted(strip_classes(d, "queue")) == ["bar outcome-ok", "bar outcome-ok", "bar outcome-refused"])
    assert driver.current_url == f"http://127.0.0.1:{admin.port}/"
    # The page's content was replaced in place by refresh.js (the marked element is gone from the document).
    assert driver.execute_script("return document.getElementById('content').dataset.first") is None
    wait_for(driver, lambda d: len(strip_classes(d, "ok")) == 4)
    assert strip_classes(driver, "ok") == ["bar outcome-ok"] * 4
    assert sorted(strip_classes(driver, "queue")) == ["bar outcome-ok", "bar outcome-ok", "bar outcome-refused"]
    save_screenshot(driver, tmp_path, "history-hooks.png")

    # The runs table, filtered with the form.
    driver.get(f"http://127.0.0.1:{admin.port}/runs")
    Select(driver.find_element(By.NAME, "outcome")).select_by_value("failed")
    driver.find_element(By.CSS_SELECTOR, "form.filters button").click()
    wait_for(driver, lambda d: "outcome=failed" in d.current_url)
    rows = driver.find_elements(By.CSS_SELECTOR, "tr.run")
    assert [(r.get_attribute("data-run"), r.get_attribute("data-outcome")) for r in rows] == [("fail-1", "failed")]
    driver.get(f"http://127.0.0.1:{admin.port}/runs")
    save_screenshot(driver, tmp_path, "history-runs.png")

    # A run's page: hostile output is shown as text; none of it runs.
    driver.get(f"http://127.0.0.1:{admin.port}/runs/hostile-1")
    output = driver.find_element(By.CSS_SELECTOR, "pre.output").text
    assert "<script>document.title='pwned'</script>" in output and "<img src=x onerror=" in output
    assert driver.title == "Run hostile-1 · hookrunner"
    scripts = driver.execute_script("return [...document.scripts].map(s => s.src)")
    assert scripts == [f"http://127.0.0.1:{admin.port}/static/refresh.js"]
    assert driver.find_elements(By.CSS_SELECTOR, "pre.output img") == []
    save_screenshot(driver, tmp_path, "history-run.png")
    driver.get(f"http://127.0.0.1:{admin.port}/runs/fail-1")
    assert "broken" in driver.find_element(By.CSS_SELECTOR, "pre.output").text
    assert severe_console_messages(driver) == []
    assert server.stop() == 0


def test_without_javascript_the_page_refreshes_itself(tmp_path: Path, servers: list[Server],
                                                        no_selenium_manager: None) -> None:
    server, admin = start(tmp_path, servers, [python_hook("ok", "print('hi')")])
    chrome = browser(tmp_path, javascript=False)
    try:
        chrome.get(f"http://127.0.0.1:{admin.port}/")
        # The page's own script does not run (a WebDriver script still does: it is not the page's).
        assert chrome.execute_script("return document.documentElement.dataset.refresh") is None
        assert outcome_badge(chrome, "ok") == ""
        trigger(server, "ok", "nojs-1")
        wait_for(chrome, lambda d: outcome_badge(d, "ok") == "ok", timeout=20)  # the <noscript> meta refresh
        chrome.find_element(By.LINK_TEXT, "nojs-1").click()
        assert "hi" in chrome.find_element(By.CSS_SELECTOR, "pre.output").text
    finally:
        chrome.quit()
    assert server.stop() == 0


def test_the_page_refuses_without_the_token(tmp_path: Path, servers: list[Server], driver: webdriver.Chrome) -> None:
    token = tmp_path / "token"
    token.write_text("t" * 32)
    server, admin = start(tmp_path, servers, [python_hook("ok", "pass")], "-admin-token-file", str(token))
    driver.get(f"http://127.0.0.1:{admin.port}/")
    assert "Authorization: Bearer" in driver.find_element(By.TAG_NAME, "body").text
    assert driver.find_elements(By.CSS_SELECTOR, "tr.hook") == []
    assert Admin(admin.port, "t" * 32).get("/")[0] == 200
    assert server.stop() == 0


assert sys.version_info >= (3, 11)
