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
from test_run_history_follow import gated, outcome
from test_serving import Server, python_hook, wait_until

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
    assert scripts == [f"http://127.0.0.1:{admin.port}/static/{name}.js" for name in ("refresh", "follow")]
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


#: Prints a numbered line, with HTML and a terminal colour in it, every 200 ms until the gate file exists.
LIVE = (
    "import os, sys, time\n"
    "n = 0\n"
    "while not os.path.exists(sys.argv[1]):\n"
    "    print(f'line {n} <b>x</b> \\x1b[32mgreen\\x1b[0m', flush=True); n += 1; time.sleep(0.2)\n"
    "print('done')"
)


def output_text(driver: webdriver.Chrome) -> str:
    return str(driver.execute_script("const p = document.querySelector('pre.output'); return p ? p.textContent : '';"))


def run_size(driver: webdriver.Chrome, rid: str) -> str:
    return str(driver.execute_script(
        "const c = document.querySelector(`tr.run[data-run=\"${arguments[0]}\"] td.size`);"
        "return c ? c.textContent : '';", rid))


def test_a_running_runs_output_grows_on_its_page(tmp_path: Path, servers: list[Server],
                                                 driver: webdriver.Chrome) -> None:
    """Lines a running command prints appear on its page before it ends (followed with EventSource, not by
    reloading the page), as text; the runs table shows its output size growing; at its end the page
    shows the outcome."""
    gate = tmp_path / "gate"
    server, admin = start(tmp_path, servers, [gated("live", LIVE, gate)])
    assert trigger(server, "live", "live-1") == 200
    assert wait_until(lambda: outcome(admin, "live-1") == "running", timeout=10)
    driver.get(f"http://127.0.0.1:{admin.port}/runs/live-1")
    wait_for(driver, lambda d: d.execute_script("return document.getElementById('content').dataset.refresh")
             == "follow")
    driver.execute_script("document.getElementById('content').dataset.first = 'yes'")
    shown = output_text(driver)
    first = shown.count("\n")
    wait_for(driver, lambda d: output_text(d).count("\n") >= first + 5)
    # Still running, never reloaded: the lines came through the EventSource.
    assert not gate.exists() and outcome(admin, "live-1") == "running"
    assert driver.execute_script("return document.getElementById('content').dataset.first") == "yes"
    text = output_text(driver)
    assert text.startswith(shown) and f"line {first + 3} <b>x</b> green\n" in text
    assert "\x1b" not in text and driver.find_elements(By.CSS_SELECTOR, "pre.output b") == []
    assert driver.find_element(By.ID, "live").is_displayed()
    assert int(driver.find_element(By.ID, "output-size").text) >= len(text.encode())
    driver.execute_script("document.querySelector('main h2').scrollIntoView()")
    save_screenshot(driver, tmp_path, "history-live-run.png")

    # The runs table: the running run's output size grows as the table refreshes itself.
    driver.get(f"http://127.0.0.1:{admin.port}/runs")
    wait_for(driver, lambda d: run_size(d, "live-1") != "")
    before = run_size(driver, "live-1")
    wait_for(driver, lambda d: run_size(d, "live-1") not in ("", before), timeout=15)
    assert outcome(admin, "live-1") == "running"
    save_screenshot(driver, tmp_path, "history-live-runs.png")

    # Its end: the page shows the last line and the outcome, with no reload by the test.
    driver.get(f"http://127.0.0.1:{admin.port}/runs/live-1")
    wait_for(driver, lambda d: d.execute_script("return document.getElementById('content').dataset.refresh")
             == "follow")
    gate.touch()
    # Read in one script each: the page replaces its content once the run has ended.
    badge = "const b = document.querySelector('h1 .badge'); return b ? b.textContent.trim() : '';"
    wait_for(driver, lambda d: "done" in output_text(d) and d.execute_script(badge) == "ok")
    assert output_text(driver).endswith("done\n")
    assert severe_console_messages(driver) == []
    assert server.stop() == 0


def test_without_javascript_a_running_runs_page_refreshes_itself(tmp_path: Path, servers: list[Server],
                                                                  no_selenium_manager: None) -> None:
    gate = tmp_path / "gate"
    server, admin = start(tmp_path, servers, [gated("live", LIVE, gate)])
    assert trigger(server, "live", "live-1") == 200
    assert wait_until(lambda: outcome(admin, "live-1") == "running", timeout=10)
    chrome = browser(tmp_path, javascript=False)
    try:
        chrome.get(f"http://127.0.0.1:{admin.port}/runs/live-1")
        lines = output_text(chrome).count("\n")
        wait_for(chrome, lambda d: output_text(d).count("\n") >= lines + 10, timeout=20)  # the meta refresh
        assert chrome.execute_script("return document.documentElement.dataset.refresh") is None
        assert chrome.find_elements(By.CSS_SELECTOR, "pre.output b") == []
    finally:
        chrome.quit()
        gate.touch()
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
