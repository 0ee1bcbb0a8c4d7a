"""The operator page (``/ui``) driven in a real browser (Debian's chromium, headless, through
its chromedriver) against a real ``serve``, PostgreSQL, the indexer worker and the search
node: what an operator types and clicks, asserted on the page's DOM (every wait is for
something to show, never a sleep). The browser reaches nothing but the service.

With ``PATHKEEPER_SCREENSHOTS=DIR`` (``./dev screenshots``) the tests also save the
README's pictures of the page there."""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from http_support import Keys, LiveServer
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait
from test_http_docs_browser import chromium

from coordinator import Coordinator
from coordinator.api_keys import create_key, revoke_key
from indexer.worker import Worker, WorkerConfig
from pathkeeper.http.app import create_app
from pathkeeper.http.settings import ServiceSettings

#: A file name that is markup: shown anywhere as HTML, it would run its handler.
HOSTILE = "<img src=x onerror=window.pwned=1>.txt"
#: The longest the page may take to show what a test waits for.
SHOW_WITHIN = 30.0
SCREENSHOTS = os.environ.get("PATHKEEPER_SCREENSHOTS")


def chromedriver() -> str:
    path = shutil.which("chromedriver")
    if path is None:
        pytest.fail("chromedriver not found: install Debian's chromium-driver package "
                    "(./dev test does)")
    return path


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[WebDriver]:
    options = webdriver.ChromeOptions()
    options.binary_location = chromium()
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--window-size=1200,720", f"--user-data-dir={tmp_path}",
                "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(chromedriver()), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def shows(driver: WebDriver, what: Callable[[WebDriver], object], why: str) -> object:
    """Wait until ``what`` is true of the page; fail saying ``why`` otherwise."""

    def probe(d: WebDriver) -> object:
        try:
            return what(d)
        except StaleElementReferenceException:  # the page redrew it: look again
            return False

    return WebDriverWait(driver, SHOW_WITHIN, poll_frequency=0.1).until(probe, why)


def texts(driver: WebDriver, css: str) -> list[str]:
    return [e.text for e in driver.find_elements(By.CSS_SELECTOR, css)]


def one(driver: WebDriver, css: str) -> WebElement:
    return driver.find_element(By.CSS_SELECTOR, css)


def enter_key(driver: WebDriver, url: str, key: str) -> None:
    driver.get(f"{url}/ui")
    box = shows(driver, lambda d: one(d, "#key-input"), "the page asks for a key")
    assert isinstance(box, WebElement)
    box.send_keys(key)
    one(driver, "#key-form button[type=submit]").click()


def search_until(driver: WebDriver, query: str, path: str) -> None:
    """Search for ``query`` until ``path`` is among the hits: the index may lag the
    indexer's checkpoint by one refresh, so the search is sent again until it shows."""
    box = one(driver, "#search-input")
    box.clear()
    box.send_keys(query)

    def found(d: WebDriver) -> bool:
        if path in texts(d, "#hits .path"):
            return True
        one(d, "#search-form button[type=submit]").click()
        return False

    shows(driver, found, f"{path} found by {query!r}")


def screenshot(driver: WebDriver, name: str) -> None:
    if SCREENSHOTS:
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(Path(SCREENSHOTS) / name))


@pytest.fixture
def ui_settings(settings: ServiceSettings, es_url: str, alias: str) -> ServiceSettings:
    return replace(settings, es_url=es_url, index_alias=alias)


def run_worker(settings: ServiceSettings, **options: object) -> Worker:
    assert settings.es_url is not None
    return Worker(WorkerConfig(database_url=settings.database_url, es_url=settings.es_url,
                               alias=settings.index_alias, partitions=2, poll_interval=0.2,
                               **options))  # type: ignore[arg-type]


def test_a_read_key_shows_lag_events_tree_and_search(
    browser: WebDriver, ui_settings: ServiceSettings, coord: Coordinator, keys: Keys
) -> None:
    run_worker(ui_settings, once=True).run()  # the indexer's checkpoints exist
    coord.mkdir("a", "/clinton/projects", parents=True)
    coord.create_file("a", "/clinton/projects/README.txt", "hello elastic world")
    coord.create_file("a", f"/{HOSTILE}", "markup in a name")
    coord.mkdir("b", "/secret-of-b")

    with LiveServer(create_app(ui_settings)) as server:
        enter_key(browser, server.url, keys.a_read)
        # The key stays in the tab's session storage, never in the URL.
        shows(browser, lambda d: one(d, "#console").is_displayed(), "the console opens")
        assert keys.a_read not in browser.current_url
        assert browser.execute_script(
            "return sessionStorage.getItem('pathkeeper.key')") == keys.a_read
        assert texts(browser, "#ns-select option") == ["a"]  # not b: the key is a's

        # No worker runs: the partitions show a's three events as lag, no holder.
        shows(browser, lambda d: sum(int(t) for t in texts(d, "td.lag-events")) == 4,
              "lag of a's four changes")
        assert set(texts(browser, "td.holder")) == {"none"}
        assert set(texts(browser, "td.namespace")) == {"a"}
        assert "secret-of-b" not in browser.page_source
        screenshot(browser, "ui-lag.png")

        # The newest events: the feed's tail shows a rename made now.
        shows(browser, lambda d: one(d, "#events").get_attribute("data-live") == "yes",
              "the feed is followed")
        coord.rename("a", "/clinton", "bill")
        shows(browser, lambda d: any("/clinton → /bill" in t for t in texts(d, "#event-list li")),
              "the rename in the newest events")
        assert texts(browser, "#event-list li .event-type")[0] == "moved"

        # A worker starts: every partition is held and the lag drains to 0.
        worker = run_worker(ui_settings)
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        try:
            shows(browser, lambda d: texts(d, "td.lag-events") == ["0", "0"]
                  and "none" not in texts(d, "td.holder"), "no lag, every partition held")
            assert all(t.isdigit() for t in texts(browser, "td.holder"))

            # The tree (listed as the namespace opened, before the rename; its root's
            # crumb lists it again): into /bill/projects, then the file's stat.
            one(browser, "#crumbs button").click()
            shows(browser, lambda d: "bill" in texts(d, "#children .name"), "the root listed")
            names = texts(browser, "#children .name")
            assert names == sorted(names) and HOSTILE in names
            browser.find_element(By.XPATH, "//ul[@id='children']//button[.='bill']").click()
            shows(browser, lambda d: texts(d, "#children .name") == ["projects"], "/bill")
            browser.find_element(By.XPATH, "//ul[@id='children']//button[.='projects']").click()
            shows(browser, lambda d: texts(d, "#children .name") == ["README.txt"], "/bill/pr")
            assert texts(browser, "#crumbs button") == ["/", "bill", "projects"]
            browser.find_element(By.XPATH, "//ul[@id='children']//button[.='README.txt']"
                                 ).click()
            shows(browser, lambda d: one(d, "#stat-path").text == "/bill/projects/README.txt",
                  "the file's stat")
            assert one(browser, "#stat-kind").text == "file"
            assert one(browser, "#stat-version").text == "1"

            # Search by text.
            search_until(browser, "elastic", "/bill/projects/README.txt")
            screenshot(browser, "ui-search.png")

            # The hostile name is text everywhere, never markup: in the tree, in the
            # search hits and in the stat of its file.
            search_until(browser, "markup", f"/{HOSTILE}")
            one(browser, "#crumbs button").click()
            shows(browser, lambda d: HOSTILE in texts(d, "#children .name"), "root again")
            hostile = [b for b in browser.find_elements(By.CSS_SELECTOR, "#children .name")
                       if b.text == HOSTILE]
            hostile[0].click()
            shows(browser, lambda d: one(d, "#stat-path").text == f"/{HOSTILE}", "its stat")
            assert browser.find_elements(By.CSS_SELECTOR, "img") == []
            assert browser.execute_script("return window.pwned") is None
        finally:
            worker.stop()
            thread.join(timeout=30)


def test_a_wrong_missing_or_foreign_key_reads_nothing(
    browser: WebDriver, ui_settings: ServiceSettings, coord: Coordinator, keys: Keys
) -> None:
    coord.mkdir("a", "/only-for-a")
    with LiveServer(create_app(ui_settings)) as server:
        # No key: the page asks for one and shows no data.
        browser.get(f"{server.url}/ui")
        shows(browser, lambda d: one(d, "#key-form").is_displayed(), "the key form")
        assert not one(browser, "#console").is_displayed()
        # Its data calls without a key are refused by the service itself.
        status = browser.execute_script(
            "return fetch('/v1/namespaces/a/node/children?path=/')"
            ".then(r => r.status)")
        assert status == 401

        enter_key(browser, server.url, "pk_not_a_key")
        shows(browser, lambda d: "refused" in one(d, "#key-error").text, "the key refused")
        assert "unauthorized" in one(browser, "#key-error").text
        assert not one(browser, "#console").is_displayed()
        assert browser.execute_script("return sessionStorage.getItem('pathkeeper.key')") is None
        screenshot(browser, "ui-key.png")

        # Another namespace's key (write scope includes read): it sees its own namespace,
        # never a's tree, and a's URLs answer as if a did not exist.
        enter_key(browser, server.url, keys.b_write)
        shows(browser, lambda d: texts(d, "#ns-select option") == ["b"], "only b")
        shows(browser, lambda d: one(d, "#children").get_attribute("data-path") == "/",
              "b's root listed")
        assert "only-for-a" not in browser.page_source
        status = browser.execute_script(
            "return fetch('/v1/namespaces/a/node/children?path=/', {headers: "
            "{Authorization: 'Bearer ' + sessionStorage.getItem('pathkeeper.key')}})"
            ".then(r => r.status)")
        assert status == 404

        # Forgetting the key clears it from the tab.
        one(browser, "#forget-key").click()
        shows(browser, lambda d: one(d, "#key-form").is_displayed(), "the key form again")
        assert browser.execute_script("return sessionStorage.getItem('pathkeeper.key')") is None

        # A key revoked while the page shows its data: the next read is refused and the
        # page asks for a key again.
        key_id, secret = create_key(coord.engine, ["a"], "read")
        enter_key(browser, server.url, secret)
        shows(browser, lambda d: one(d, "#console").is_displayed(), "the console opens")
        assert revoke_key(coord.engine, key_id)
        shows(browser, lambda d: "no longer accepts" in one(d, "#key-error").text,
              "the revoked key refused")
        assert not one(browser, "#console").is_displayed()
        assert browser.execute_script("return sessionStorage.getItem('pathkeeper.key')") is None
