"""The page at / (serving/page.html) in a real headless Chromium, against serve.py started
as a subprocess on a trained run (127.0.0.1 only): its translation is the Python API's,
hovering a word, or reaching it with Tab, highlights the words its alignment
(/v1/translate's) links and no others,
and a refused request and a server that is gone show their message in the status line.

Needs Debian's chromium and chromium-driver (.ci/run installs them); skipped without them.
With TRANSFORMER_PAGE_SCREENSHOT=FILE.png it also keeps a screenshot of the page after a
translation, a word hovered."""

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from selenium import webdriver
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

from helpers import ROOT, free_port
from transformer_tf2 import Translator

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
MISSING = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        bool(MISSING),
        reason=f"no {' and no '.join(MISSING)}: apt-get install chromium chromium-driver",
    ),
]

SENTENCES = ["Die Frau liest ein Buch.", "Ein Mann geht in den Park."]
MAX_CHARS = 120  # the server's --max_chars: a longer sentence gets 413
# no proxy for 127.0.0.1, whatever the environment says
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def post(port: int, path: str, fields: dict) -> tuple[int, dict]:
    """The status and JSON body of a POST of ``fields`` to the server."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=json.dumps(fields).encode("utf-8"),
        headers={"Content-Type": "application/json"},
    )
    try:
        with OPENER.open(request, timeout=120) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as e:
        with e:
            return e.code, json.load(e)


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM (the server drains and exits), SIGKILL if it has not gone in 30 s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)


@contextlib.contextmanager
def server(logdir: str, log_path):
    """serve.py starting on a free port of 127.0.0.1: (process, port); stopped at the end,
    however the block ends. :func:`wait_ready` waits for it to take requests."""
    port = free_port()
    command = [sys.executable, "serve.py", "--logdir", logdir, "--port", str(port)]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [*command, "--max_chars", str(MAX_CHARS)],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        yield proc, port
    finally:
        stop(proc)


def wait_ready(proc: subprocess.Popen, port: int, log_path, seconds: float = 240) -> None:
    """Until /health answers 200; a failure with the server's output if it exits first
    or takes longer than ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = log_path.read_text(errors="replace")[-3000:]
            pytest.fail(f"serve.py did not become ready (exit {proc.poll()}):\n{tail}")
        try:
            with OPENER.open(f"http://127.0.0.1:{port}/health", timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.25)


def chrome() -> webdriver.Chrome:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--no-proxy-server",
        "--window-size=1200,900",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    driver.set_script_timeout(30)
    return driver


def hot(driver) -> set:
    """The words highlighted: (side "s" or "t", line, index) each."""
    found = driver.execute_script(
        "return [...document.querySelectorAll('.w.hot')].map("
        "(e) => [e.dataset.side, Number(e.dataset.line), Number(e.dataset.index)]);"
    )
    return {tuple(w) for w in found}


def until(driver, condition, seconds: float, what: str):
    try:
        return WebDriverWait(driver, seconds, poll_frequency=0.05).until(condition)
    except TimeoutException:
        pass
    pytest.fail(f"after {seconds} s, still not {what}")


def lit_as(driver, want: set, what: str) -> None:
    """Wait (5 s at most) until exactly the words ``want`` are highlighted."""
    try:
        WebDriverWait(driver, 5, poll_frequency=0.05).until(lambda d: hot(d) == want)
        return
    except TimeoutException:
        pass
    pytest.fail(f"{what}: highlighted {sorted(hot(driver))}, not {sorted(want)}")


def hover(driver, element) -> None:
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", element)
    ActionChains(driver).move_to_element(element).perform()


def status(driver) -> tuple[str, bool]:
    """The status line's text and whether it shows an error."""
    line = driver.find_element(By.ID, "status")
    return line.text, "error" in (line.get_attribute("class") or "").split()


def test_page_translates_highlights_alignments_and_shows_errors(run, tmp_path):
    logdir, log_path = run[0].logdir, tmp_path / "serve.log"
    with server(logdir, log_path) as (proc, port):
        # the Python API's translations, while the server loads
        expected = Translator.from_run(logdir).translate(SENTENCES)
        assert all(expected), expected  # words to hover
        wait_ready(proc, port, log_path)
        code, body = post(port, "/v1/translate", {"q": SENTENCES, "alignments": True})
        assert code == 200, body
        best = [hyps[0] for hyps in body["translations"]]
        assert [h["text"] for h in best] == expected
        links = [[tuple(map(int, p.split("-"))) for p in h["alignment"].split()] for h in best]
        driver = chrome()
        try:
            # a translation: the page's words are the Python API's
            driver.get(f"http://127.0.0.1:{port}/")
            driver.find_element(By.ID, "source").send_keys("\n".join(SENTENCES))
            driver.find_element(By.ID, "go").click()
            lines = until(
                driver,
                lambda d: (
                    len(d.find_elements(By.CSS_SELECTOR, "#pairs .tgt")) == len(SENTENCES)
                    and d.find_elements(By.CSS_SELECTOR, "#pairs .tgt")
                ),
                120,
                "translated",
            )
            assert [line.text for line in lines] == [" ".join(e.split()) for e in expected]
            sources = driver.find_elements(By.CSS_SELECTOR, "#pairs .src")
            assert [line.text for line in sources] == SENTENCES
            announced = driver.find_element(By.ID, "announce").get_attribute("textContent")
            assert announced == " ".join(expected)  # the live region (aria-live)
            assert driver.find_element(By.ID, "announce").get_attribute("aria-live") == "polite"
            assert status(driver) == ("", False)
            assert hot(driver) == set()

            # hovering each word lights it and the words its links name, no other
            for k, pairs in enumerate(links):
                words = {
                    side: driver.find_elements(
                        By.CSS_SELECTOR, f'#pairs .w[data-side="{side}"][data-line="{k}"]'
                    )
                    for side in "st"
                }
                assert [w.text for w in words["s"]] == SENTENCES[k].split()
                assert [w.text for w in words["t"]] == expected[k].split()
                # the links name the words the page shows
                assert all(i < len(words["s"]) and j < len(words["t"]) for i, j in pairs), pairs
                # every German word; the first English ones (a runaway repeats itself)
                for side, other in (("s", "t"), ("t", "s")):
                    for i, word in enumerate(words[side][: None if side == "s" else 6]):
                        mine = 0 if side == "s" else 1
                        want = {(side, k, i)} | {
                            (other, k, p[1 - mine]) for p in pairs if p[mine] == i
                        }
                        hover(driver, word)
                        lit_as(driver, want, f"{side} word {i} of line {k} hovered, links {pairs}")
            # the pointer leaves: nothing stays lit
            hover(driver, driver.find_element(By.TAG_NAME, "h1"))
            lit_as(driver, set(), "the pointer gone")

            # the keyboard: Tab from the button reaches the first words in turn, and each
            # lights as when hovered; Shift+Tab back to the button lights nothing
            driver.execute_script("document.getElementById('go').focus();")
            for i in range(2):
                ActionChains(driver).send_keys(Keys.TAB).perform()
                want = {("s", 0, i)} | {("t", 0, j) for s, j in links[0] if s == i}
                lit_as(driver, want, f"source word {i} of line 0 reached with Tab")
            ActionChains(driver).key_down(Keys.SHIFT).send_keys(Keys.TAB).send_keys(
                Keys.TAB
            ).key_up(Keys.SHIFT).perform()
            assert driver.switch_to.active_element.get_attribute("id") == "go"
            lit_as(driver, set(), "focus back on the button")

            # a picture of it: the source word with the most links hovered
            k, i = max(
                ((k, i) for k, pairs in enumerate(links) for i, _ in pairs),
                key=lambda ki: sum(p[0] == ki[1] for p in links[ki[0]]),
            )
            word = driver.find_element(
                By.CSS_SELECTOR, f'#pairs .w[data-side="s"][data-line="{k}"][data-index="{i}"]'
            )
            hover(driver, word)
            until(driver, lambda d: len(hot(d)) > 1, 5, "lit for the picture")
            picture = tmp_path / "page.png"
            assert driver.save_screenshot(str(picture))
            assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
            if os.environ.get("TRANSFORMER_PAGE_SCREENSHOT"):
                shutil.copyfile(picture, os.environ["TRANSFORMER_PAGE_SCREENSHOT"])

            # a sentence over --max_chars: the server's 413 text in the status line, and
            # the translation of the earlier text is gone
            long_sentence = ("Ein sehr langer Satz. " * 20)[: MAX_CHARS + 1]
            code, refused = post(port, "/v1/translate", {"q": [long_sentence]})
            assert code == 413 and f"({MAX_CHARS} characters)" in refused["error"], refused
            box = driver.find_element(By.ID, "source")
            box.clear()
            box.send_keys(long_sentence)
            driver.find_element(By.ID, "go").click()
            until(driver, lambda d: status(d)[1], 30, "showing an error")
            assert status(driver) == (refused["error"], True)
            assert not driver.find_element(By.ID, "result").is_displayed()

            # a short sentence again: translated, the error gone
            box.clear()
            box.send_keys(SENTENCES[0])
            driver.find_element(By.ID, "go").click()
            until(driver, lambda d: d.find_element(By.ID, "result").is_displayed(), 60, "shown")
            tgt = driver.find_elements(By.CSS_SELECTOR, "#pairs .tgt")
            assert [line.text for line in tgt] == [" ".join(expected[0].split())]
            assert status(driver) == ("", False)

            # the server gone: the page says it did not answer
            stop(proc)
            driver.find_element(By.ID, "go").click()
            until(driver, lambda d: status(d)[1], 30, "showing that the server is gone")
            assert status(driver)[0].startswith("the server did not answer"), status(driver)
        finally:
            driver.quit()
