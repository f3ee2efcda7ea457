"""The web explorer in headless Chromium (Debian's, driven by selenium and Debian's chromedriver;
nothing is downloaded): ask a sample question, open a citation and check that the highlighted
text is the cited span, by mouse and by keyboard; a narrow window; add and delete a document;
an entity's page and its drawing. Screenshots go to OUT_DIR.
Usage: browser.py BASE_URL OUT_DIR"""

import json
import os
import sys
import tempfile
import urllib.parse
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions as ready
from selenium.webdriver.support.ui import WebDriverWait

QUESTION = "In what year was the trawler Morning Star lost?"


def get_json(base, path):
    with urllib.request.urlopen(base + path, timeout=30) as response:
        return json.load(response)


def browser(profile):
    options = Options()
    options.binary_location = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    for flag in [
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--window-size=1280,900",
    ]:
        options.add_argument(flag)
    service = Service(os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver"))
    return webdriver.Chrome(service=service, options=options)


def check_cited_span(driver, base, wait):
    """The page shows a document with a highlighted span: it must equal the span the URL names,
    as the API gives it, and be in view."""
    mark = wait.until(ready.presence_of_element_located((By.ID, "cited-span")))
    fragment = driver.execute_script("return location.hash")
    path, query = fragment[1:].split("?")
    doc_id = urllib.parse.unquote(path.split("/", 1)[1])
    params = urllib.parse.parse_qs(query)
    start, end = int(params["start"][0]), int(params["end"][0])
    expected = get_json(base, f"/v1/indexes/sample/documents/{urllib.parse.quote(doc_id)}?start={start}&end={end}")["text"]
    shown = driver.execute_script("return document.getElementById('cited-span').textContent")
    assert shown == expected, (shown, expected)
    visible = driver.execute_script(
        "const m = document.getElementById('cited-span').getBoundingClientRect();"
        "const c = document.querySelector('.document-text').getBoundingClientRect();"
        "return m.bottom > c.top && m.top < c.bottom && m.top < window.innerHeight;"
    )
    assert visible, "the cited span is not scrolled into view"
    return doc_id, start, end


def ask(driver, wait, question):
    driver.execute_script("document.getElementById('result').replaceChildren()")  # no earlier answer
    box = wait.until(ready.element_to_be_clickable((By.ID, "question")))
    box.clear()
    box.send_keys(question)
    box.send_keys(Keys.CONTROL, Keys.ENTER)  # the keyboard way to ask
    wait.until(lambda d: d.find_element(By.ID, "answer-text").text.strip())
    return driver.find_element(By.ID, "answer-text").text


def main(base, out):
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory() as profile:
        driver = browser(profile)
        try:
            wait = WebDriverWait(driver, 30, ignored_exceptions=[StaleElementReferenceException])
            driver.get(base + "/#ask")
            wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#index option"))
            answer = ask(driver, wait, QUESTION)
            assert "1952" in answer, answer
            driver.save_screenshot(os.path.join(out, "answer.png"))

            # A click on the first citation opens its document with the span highlighted.
            driver.find_element(By.CSS_SELECTOR, ".answer button.cite").click()
            doc_id, start, end = check_cited_span(driver, base, wait)
            driver.save_screenshot(os.path.join(out, "citation.png"))

            # By keyboard: back to the answer, Tab to a citation, Enter.
            driver.find_element(By.CSS_SELECTOR, "a.back").send_keys(Keys.ENTER)
            wait.until(ready.visibility_of_element_located((By.ID, "answer-text")))
            driver.execute_script("document.getElementById('question').focus()")
            for _ in range(40):
                active = driver.switch_to.active_element
                if "cite" in (active.get_attribute("class") or ""):
                    break
                active.send_keys(Keys.TAB)
            else:
                raise AssertionError("Tab never reached a citation")
            driver.switch_to.active_element.send_keys(Keys.ENTER)
            check_cited_span(driver, base, wait)

            # A narrow window: the evidence goes below the answer.
            driver.set_window_size(420, 900)
            driver.get(base + "/#ask")
            ask(driver, wait, QUESTION)
            below = driver.execute_script(
                "const a = document.querySelector('.answer').getBoundingClientRect();"
                "const e = document.querySelector('.evidence').getBoundingClientRect();"
                "return e.top >= a.bottom - 1 && document.documentElement.scrollWidth <= window.innerWidth + 1;"
            )
            assert below, "in a narrow window the evidence is not below the answer, or the page scrolls sideways"
            driver.save_screenshot(os.path.join(out, "narrow.png"))
            driver.set_window_size(1280, 900)

            # Documents: upload a file, see it processed, delete it.
            note = os.path.join(profile, "pilot-boat.md")
            with open(note, "w") as f:
                f.write("# The pilot boat Wren\n\nThe pilot boat Wren left Orrin Quay at dawn with a crew of three.\n")
            driver.get(base + "/#documents")
            driver.find_element(By.ID, "files").send_keys(note)
            driver.find_element(By.CSS_SELECTOR, "#upload-form button[type=submit]").click()
            WebDriverWait(driver, 120).until(lambda d: "done" in d.find_element(By.ID, "jobs").text)
            WebDriverWait(driver, 30).until(
                lambda d: d.find_elements(By.XPATH, "//table//a[normalize-space()='The pilot boat Wren']")
            )
            driver.save_screenshot(os.path.join(out, "documents.png"))
            row = driver.find_element(By.XPATH, "//tr[.//a[normalize-space()='The pilot boat Wren']]")
            row.find_element(By.CSS_SELECTOR, "button.delete").click()
            driver.switch_to.alert.accept()
            WebDriverWait(driver, 120).until(
                lambda d: "delete): done" in d.find_element(By.ID, "jobs").text
            )
            WebDriverWait(driver, 30).until(
                lambda d: not d.find_elements(By.XPATH, "//table//a[normalize-space()='The pilot boat Wren']")
            )

            # An entity's page: found by name, drawn, a neighbour a click away.
            driver.get(base + "/#entities")
            search = wait.until(ready.element_to_be_clickable((By.ID, "entity-query")))
            search.send_keys("Morning Star", Keys.ENTER)
            wait.until(ready.element_to_be_clickable((By.CSS_SELECTOR, "#entity-hits a"))).click()
            wait.until(ready.presence_of_element_located((By.CSS_SELECTOR, "svg.graph a.entity-node")))
            title = driver.find_element(By.CSS_SELECTOR, "#view-entity h2").text
            assert title == "Morning Star", title
            squares = driver.find_elements(By.CSS_SELECTOR, "svg.graph a.hyperedge-node")
            assert squares, "no hyperedge drawn"
            driver.save_screenshot(os.path.join(out, "entity.png"))
            neighbour = driver.find_element(By.CSS_SELECTOR, "svg.graph a.entity-node")
            name = neighbour.find_element(By.TAG_NAME, "title").get_attribute("textContent")
            neighbour.find_element(By.TAG_NAME, "circle").click()
            wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "#view-entity h2").text == name)
        finally:
            driver.quit()
    print(f"browser: answer, citation {doc_id} [{start}..{end}] highlighted (mouse and keyboard), narrow window, "
          f"upload and delete, entity page: ok; screenshots in {out}")


if __name__ == "__main__":
    main(sys.argv[1].rstrip("/"), sys.argv[2])
