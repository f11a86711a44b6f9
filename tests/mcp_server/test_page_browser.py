"""The page in a real browser: Debian's headless Chromium, driven by Selenium through Debian's
ChromeDriver, against the recall server's real HTTP app on a free port, over a store that
`librarian ingest`'s own job filled from transcripts (one of them hostile).

Without /usr/bin/chromium and /usr/bin/chromedriver (`.ci/run` installs them) these skip, saying
so. With LIBRARIAN_TEST_SCREENSHOTS set to a folder, the tests leave their screenshots there
(docs/images/ holds the ones the README shows).
"""

import functools
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from librarian_dagster.core.assembly.forgetting import forget_sessions
from librarian_dagster.core.assembly.providers import configured_embedder
from librarian_dagster.core.assembly.store import Store
from librarian_dagster.core.capture.readers import session_files_for
from librarian_dagster.core.store.memories import ChunkRecord
from librarian_dagster.dagster_internals import dispose_instance
from librarian_dagster.ingest import ingest_sessions, open_instance
from mcp_server.app import Served, build_server, http_app
from mcp_server.page import SESSIONS_PER_PAGE
from tests.core.test_store import memory_record
from tests.helpers import free_port, make_settings, serve_http, write_transcript

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
pytestmark = [
    pytest.mark.skipif(
        not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
        reason="Debian's chromium and chromium-driver are not installed (.ci/run installs them)",
    ),
    # One browser, one server and one ingested store for the module.
    pytest.mark.xdist_group("page_browser"),
]
HOSTILE = "ee1e0000-0000-4000-8000-00000000cafe"
# The offline digester drops short tags as noise (core/digest/offline.py); these are long enough
# to pass, as anything passes an LLM's digest.
PAD = "x" * 90
SCRIPT = f'<script data-pad="{PAD}">window.pwned = 1</script>'
IMAGE = f'<img src="nowhere" data-pad="{PAD}" onerror="window.pwned = 2">'
PAYLOAD = f"Why does the parser choke on {SCRIPT} and {IMAGE} in the sqlite migration notes?"
SESSIONS = {
    "11111111-1111-4111-8111-111111111111": (
        "The sqlite migration fails with 'database is locked' when the cache warms up.",
        "Fixed: the warm-up held a write transaction open. I set busy_timeout=5000 and moved the "
        "warm-up after the migration; the migration test passes now.",
    ),
    "22222222-2222-4222-8222-222222222222": (
        "Add retries with backoff to the Telegram alert sender.",
        "Done: three tries with exponential backoff, honouring Retry-After on 429.",
    ),
    HOSTILE: (PAYLOAD, "The notes hold raw HTML; escape it before rendering the sqlite notes."),
}


@pytest.fixture(scope="module")
def site(pg_server, tmp_path_factory):
    """The recall server, over a store ingested from the transcripts above and 30 sessions of
    another project (to page through)."""
    root = tmp_path_factory.mktemp("page")
    folder = root / "mirror" / "-work-app"
    for session_id, (prompt, reply) in SESSIONS.items():
        write_transcript(folder, session_id, prompt, reply)
    import psycopg
    from psycopg import sql

    name = f"page_browser_{os.getpid()}"
    with psycopg.connect(pg_server.get_uri(), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    settings = make_settings(root, pg_server.get_uri(name), folder.parent)
    instance = open_instance(settings)
    outcomes = ingest_sessions(session_files_for([folder]), settings, instance)
    dispose_instance(instance)
    assert [o.status for o in outcomes] == ["ingested"] * len(SESSIONS), outcomes
    embedder = configured_embedder(settings)
    with Store(settings.database_url) as store:
        for i in range(SESSIONS_PER_PAGE + 5):
            record = memory_record(f"p{i:02d}", project="paging", days_ago=i,
                                   embedding_model=embedder.model_name)  # fmt: skip
            vector = embedder.embed_documents([f"paging note {i}"])[0]
            store.memories.replace_memory(record, [ChunkRecord("solution", 0, "note", vector)])
        server = build_server(
            Served.of(store, embedder),
            settings.recall_threshold,
            forget=lambda ids: forget_sessions(ids, settings, store, history=None),
            dagster_url=settings.ui_url,
        )
        with serve_http(http_app(server, "127.0.0.1"), free_port()) as url:
            yield url


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="librarian-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    # Headless, as root, and quiet on a closed network: no sync, updates or first-run fetches.
    for flag in (
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--window-size=1200,900", f"--user-data-dir={profile}",
    ):  # fmt: skip
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _shot(browser, name: str) -> None:
    folder = os.environ.get("LIBRARIAN_TEST_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(Path(folder) / f"{name}.png"))


def _follow(browser, act, shown: str) -> None:
    """`act()` (a click, a key), then wait for the next page to have replaced this one and to
    show `shown` (a CSS selector): a click returns before the browser has navigated."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.wait import WebDriverWait

    page = browser.find_element(By.TAG_NAME, "html")

    def replaced(_driver) -> bool:
        # Selenium's staleness_of hears only StaleElementReferenceException; asked while the
        # page goes, ChromeDriver may instead answer "Node with given id does not belong to the
        # document", the same news.
        try:
            page.is_enabled()
        except WebDriverException:
            return True
        return False

    act()
    WebDriverWait(browser, 30).until(replaced)
    WebDriverWait(browser, 30).until(ec.presence_of_element_located((By.CSS_SELECTOR, shown)))


def _click(browser, by: str, what: str, shown: str) -> None:
    _follow(browser, browser.find_element(by, what).click, shown)


def _search(browser, site: str, question: str) -> None:
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    for attempt in range(3):
        browser.get(site + "/")
        try:
            box = browser.find_element(By.NAME, "q")
            _follow(
                browser, functools.partial(box.send_keys, question, Keys.ENTER), "p.note, p.nothing"
            )
            return
        except WebDriverException:
            # ChromeDriver, on a busy machine, now and then loses the node it just found
            # ("Node with given id does not belong to the document"): the page is loaded anew.
            if attempt == 2:
                raise


def test_a_search_typed_in_the_box_shows_cards_and_the_url_keeps_it(site, browser):
    from selenium.webdriver.common.by import By

    _search(browser, site, "sqlite database is locked during warm-up")
    cards = browser.find_elements(By.CSS_SELECTOR, "article.card")
    assert cards, browser.page_source[:2000]
    assert "busy_timeout" in cards[0].text or "locked" in cards[0].text
    assert "q=sqlite+database+is+locked" in browser.current_url  # a bookmarkable GET
    _shot(browser, "page-search")
    _search(browser, site, "kubernetes helm chart ingress annotations for grpc")
    assert browser.find_element(By.CSS_SELECTOR, "p.nothing").text.startswith("Nothing relevant")


def test_a_transcript_s_script_is_shown_as_text_and_never_runs(site, browser):
    from selenium.webdriver.common.by import By

    for path in (
        "/?q=" + "parser chokes on script tags in the sqlite notes",
        f"/session/{HOSTILE}",
    ):
        browser.get(site + path)
        for folded in browser.find_elements(By.CSS_SELECTOR, "details > summary"):
            folded.click()  # what matched, unfolded: Selenium reads only what is shown
        shown = browser.find_element(By.TAG_NAME, "main").text
        assert f'<script data-pad="{PAD}">window.pwned = 1' in shown, path
        assert IMAGE in shown or path.startswith("/?"), path  # a card cuts a long line
        assert browser.execute_script("return window.pwned === undefined"), path
        assert browser.find_elements(By.CSS_SELECTOR, "main script, main img") == [], path
        hrefs = [a.get_attribute("href") or "" for a in browser.find_elements(By.TAG_NAME, "a")]
        assert not any(h.startswith("javascript:") for h in hrefs), path


def test_a_card_opens_its_session_page(site, browser):
    from selenium.webdriver.common.by import By

    _search(browser, site, "telegram alert retries backoff")
    _click(browser, By.CSS_SELECTOR, "article.card h2 a", "article.session")
    assert "/session/22222222-2222-4222-8222-222222222222" in browser.current_url
    headings = [h.text for h in browser.find_elements(By.TAG_NAME, "h2")]
    assert "Files changed" in headings and any(h.startswith("Indexed chunks") for h in headings)
    assert "Retry-After" in browser.find_element(By.TAG_NAME, "main").text
    _shot(browser, "page-session")


def test_a_project_is_paged_newest_first(site, browser):
    from selenium.webdriver.common.by import By

    browser.get(site + "/projects")
    _click(browser, By.LINK_TEXT, "paging", "ol.sessions")
    first = [a.text for a in browser.find_elements(By.CSS_SELECTOR, "ol.sessions > li > a")]
    assert len(first) == SESSIONS_PER_PAGE and first[0] == "summary of p00"
    _click(browser, By.LINK_TEXT, "Older sessions", "ol.sessions")
    rest = [a.text for a in browser.find_elements(By.CSS_SELECTOR, "ol.sessions > li > a")]
    assert rest == [f"summary of p{i:02d}" for i in range(SESSIONS_PER_PAGE, SESSIONS_PER_PAGE + 5)]
    assert browser.find_elements(By.LINK_TEXT, "Older sessions") == []


def test_forget_asks_first_then_leaves_nothing_to_find(site, browser):
    from selenium.webdriver.common.by import By

    session = "11111111-1111-4111-8111-111111111111"
    browser.get(f"{site}/session/{session}")
    _click(browser, By.LINK_TEXT, "Forget this session…", "form.forget")
    assert "cannot be undone" in browser.find_element(By.TAG_NAME, "main").text
    _shot(browser, "page-forget")
    _click(browser, By.LINK_TEXT, "Keep it", "article.session")  # one's mind changed: kept
    assert browser.current_url.endswith(f"/session/{session}")
    _click(browser, By.LINK_TEXT, "Forget this session…", "form.forget")
    _click(browser, By.CSS_SELECTOR, "form.forget button", "section.forgotten")
    said = browser.find_element(By.TAG_NAME, "main").text
    assert "forgot 1 session(s): 1 memories with their chunks" in said, said
    _search(browser, site, "sqlite database is locked during warm-up")
    assert session not in browser.page_source
    browser.get(f"{site}/session/{session}")
    assert "no session" in browser.find_element(By.TAG_NAME, "main").text
