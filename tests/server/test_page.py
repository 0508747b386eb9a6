"""The chat page at `/`: served from the binary, then driven in Debian's headless chromium.

The HTTP checks always run. The browser tests need selenium (in build/test-venv) and chromium +
chromedriver (scripts/test_deps.sh installs all three); without them they skip saying why, or
fail when INKLING_REQUIRE_BROWSER=1 (CI). The page's requests carry the scripted output the
tests choose through sessionStorage["inkling.test_script"], which only a --test-scripts server
honours. Screenshots at desktop and phone sizes go to build/webui-screenshots/.
"""
import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest

from conftest import BINARY, REASONING_TEXT_TWO_CALLS, answer, wait_new_log

PAGE_FILES = ["index.html", "app.js", "markdown.js", "style.css", "icon.svg"]
PAGE_DIR = Path(__file__).resolve().parents[2] / "src" / "apps" / "server" / "page"
SCREENSHOTS = BINARY.parent / "webui-screenshots"
DESKTOP, PHONE = (1280, 860), (390, 844)


def slots_free(server, timeout=3.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not any(s["busy"] for s in server.get("/slots").json()):
            return True
        time.sleep(0.02)
    return False


# ---- HTTP ---------------------------------------------------------------------------------------

def test_page_files_are_served_with_a_strict_policy(server):
    before = len(server.lines)
    r = server.get("/")
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/html")
    assert '<script type="module" src="/page/app.js">' in r.text
    csp = r.headers["Content-Security-Policy"]
    for directive in ("default-src 'none'", "script-src 'self'", "connect-src 'self'", "style-src 'self'",
                      "frame-ancestors 'none'"):
        assert directive in csp, directive
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp and "http" not in csp
    assert r.headers["X-Content-Type-Options"] == "nosniff"
    types = {"app.js": "text/javascript", "markdown.js": "text/javascript", "style.css": "text/css",
             "icon.svg": "image/svg+xml"}
    for name, content_type in types.items():
        r = server.get("/page/" + name)
        assert r.status_code == 200 and r.headers["Content-Type"].startswith(content_type), name
        assert r.content == (PAGE_DIR / name).read_bytes(), f"{name}: the embedded copy differs from the source"
        assert "script-src 'self'" in r.headers["Content-Security-Policy"]
    missing = server.get("/page/nothing.js")
    assert missing.status_code == 404 and "no page file" in missing.json()["error"]["message"]
    assert wait_new_log(server, before, r"^GET / 200 [\d.]+ ms$")
    assert wait_new_log(server, before, r"^GET /page/app\.js 200 [\d.]+ ms$")
    assert wait_new_log(server, before, r"^GET /page/nothing\.js 404 [\d.]+ ms \| no page file")


def test_page_is_public_but_the_api_is_not(keyed_server):
    assert keyed_server.get("/").status_code == 200
    assert keyed_server.get("/page/app.js").status_code == 200
    assert keyed_server.get("/v1/models").status_code == 401
    assert keyed_server.get("/slots").status_code == 401


def test_page_sources_never_assign_html():
    """A guard on the sources: model text must never reach an HTML parser."""
    for name in ("app.js", "markdown.js"):
        source = (PAGE_DIR / name).read_text()
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
            assert sink not in source, f"{name} uses {sink}"
    html = (PAGE_DIR / "index.html").read_text()
    assert re.findall(r"<script[^>]*>", html) == ['<script type="module" src="/page/app.js">']
    assert not re.search(r"<[^>]+\son\w+=", html), "inline event handler in index.html"
    assert sorted(p.name for p in PAGE_DIR.iterdir()) == sorted(PAGE_FILES)


# ---- the browser --------------------------------------------------------------------------------

def _browser_missing():
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (scripts/test_deps.sh puts it into build/test-venv)"
    if not shutil.which("chromedriver") or not (shutil.which("chromium") or shutil.which("chromium-browser")):
        return "chromium / chromedriver not found (scripts/test_deps.sh installs Debian's chromium and chromium-driver)"
    return None


@pytest.fixture(scope="module")
def browser():
    why = _browser_missing()
    if why:
        if os.environ.get("INKLING_REQUIRE_BROWSER") == "1":
            pytest.fail("INKLING_REQUIRE_BROWSER=1 but " + why)
        pytest.skip(why)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--disable-extensions", "--no-first-run", f"--window-size={DESKTOP[0]},{DESKTOP[1]}"):
        options.add_argument(arg)
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    options.binary_location = binary
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    driver.set_page_load_timeout(20)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    yield driver
    driver.quit()


def wait(driver, condition, timeout=10.0, what="condition"):
    from selenium.webdriver.support.ui import WebDriverWait
    return WebDriverWait(driver, timeout, poll_frequency=0.03).until(lambda d: condition(d), message=what)


def js(driver, script, *args):
    return driver.execute_script(script, *args)


def open_page(driver, server, fresh=True):
    driver.set_window_size(*DESKTOP)
    driver.get(server.url + "/")
    if fresh:
        js(driver, "localStorage.clear(); sessionStorage.clear();")
        driver.get(server.url + "/")
    wait(driver, lambda d: js(d, "return document.body.dataset.ready === '1'"), what="the page's script ran")
    driver.get_log("browser")  # start each test with an empty console


def console_errors(driver, allow=()):
    entries = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    return [e["message"] for e in entries if not any(a in e["message"] for a in allow)]


def send(driver, text, script=None):
    from selenium.webdriver.common.keys import Keys
    if script is None:
        js(driver, "sessionStorage.removeItem('inkling.test_script')")
    else:
        js(driver, "sessionStorage.setItem('inkling.test_script', arguments[0])", script)
    box = driver.find_element("id", "input")
    box.click()
    box.send_keys(text)
    box.send_keys(Keys.ENTER)


def last_reply(driver):
    return driver.find_elements("css selector", "#messages .msg.assistant")[-1]


def reply_done(driver):
    """The last reply once its stream ended: its figures, else None."""
    replies = driver.find_elements("css selector", "#messages .msg.assistant")
    if not replies or "live" in replies[-1].get_attribute("class"):
        return None
    return replies[-1]


def wait_reply(driver, timeout=15.0):
    return wait(driver, reply_done, timeout, "the reply to finish")


def text_of(element, selector):
    return element.find_element("css selector", selector).get_attribute("textContent")


def test_reasoning_streams_into_its_panel_then_the_answer(browser, slow_server):
    reasoning = "First I weigh the question, then I count to five: one two three four five. Done."
    open_page(browser, slow_server)
    send(browser, "What is five?", answer("It is **five**.", reasoning=reasoning))
    # While the model thinks: the panel is open, says so, and holds part of the reasoning; no answer yet.
    seen = wait(browser, lambda d: js(d, """
        const r = [...document.querySelectorAll('#messages .msg.assistant')].pop();
        if (!r) return null;
        const text = r.querySelector('.reasoning-text').textContent;
        const content = r.querySelector('.content').textContent;
        return text.length > 0 && content === '' ? {text, open: r.querySelector('.reasoning').open,
            summary: r.querySelector('summary').textContent, live: r.classList.contains('live')} : null;
    """), what="reasoning streaming before the answer")
    assert seen["open"] and seen["live"] and seen["summary"] == "Thinking…"
    assert reasoning.startswith(seen["text"]) and len(seen["text"]) < len(reasoning)
    assert browser.find_element("id", "stop").is_displayed()
    reply = wait_reply(browser)
    assert text_of(reply, ".reasoning-text") == reasoning
    assert text_of(reply, ".content") == "It is five."
    assert text_of(reply, ".content strong") == "five"
    assert not js(browser, "return arguments[0].querySelector('.reasoning').open", reply), "the panel folds once the answer begins"
    assert text_of(reply, "summary") == "Reasoning"
    figures = reply.find_element("css selector", ".figures")
    assert int(figures.get_attribute("data-prompt")) > 0 and int(figures.get_attribute("data-generated")) > 10
    assert re.search(r"prompt \d+ · \d+ generated · [\d.]+ tokens/s", figures.text), figures.text
    assert browser.find_element("id", "send").is_displayed()
    # The reader's choice wins: folded while the model still thinks, it stays folded.
    send(browser, "And six?", answer("Six.", reasoning=" ".join(f"step{i}" for i in range(20))))
    wait(browser, lambda d: js(d, "const r = [...document.querySelectorAll('.msg.assistant')].pop();"
                                  "return r.querySelector('.reasoning').open && r.querySelector('.reasoning-text').textContent.length > 0"),
         what="the second reasoning streaming")
    last_reply(browser).find_element("css selector", "summary").click()
    grown_from = len(text_of(last_reply(browser), ".reasoning-text"))
    wait(browser, lambda d: len(text_of(last_reply(d), ".reasoning-text")) > grown_from + 10, what="more reasoning")
    assert not js(browser, "return [...document.querySelectorAll('.reasoning')].pop().open")
    assert text_of(last_reply(browser), ".content") == ""
    reply = wait_reply(browser)
    assert text_of(reply, ".content") == "Six." and text_of(reply, ".reasoning-text").endswith("step19")
    reply.find_element("css selector", "summary").click()
    assert js(browser, "return [...document.querySelectorAll('.reasoning')].pop().open")
    assert console_errors(browser) == []


def test_tool_calls_are_cards(browser, server):
    open_page(browser, server)
    send(browser, "Weather in Paris?", REASONING_TEXT_TWO_CALLS)
    reply = wait_reply(browser)
    cards = reply.find_elements("css selector", ".tool-card")
    assert [text_of(c, ".tool-name") for c in cards] == ["get_weather", "get_time"]
    assert json.loads(text_of(cards[0], ".tool-args")) == {"city": "Paris"}
    assert json.loads(text_of(cards[1], ".tool-args")) == {"zone": "CET"}
    assert all(c.get_attribute("data-id") for c in cards)
    assert text_of(reply, ".content") == "Let me check."
    assert text_of(reply, ".reasoning-text") == "The user wants weather."
    # The next turn sends the calls back; the server takes the history.
    send(browser, "Thanks.", answer("You are welcome."))
    reply = wait_reply(browser)
    assert text_of(reply, ".content") == "You are welcome.", text_of(reply, ".error")


def test_stop_cancels_on_the_server(browser, slow_server):
    from selenium.webdriver.common.keys import Keys
    open_page(browser, slow_server)
    long_answer = answer(" ".join(f"word{i}" for i in range(400)))
    for how in ("button", "escape"):
        before = len(slow_server.lines)
        send(browser, f"Talk for a long time ({how}).", long_answer)
        wait(browser, lambda d: len(text_of(last_reply(d), ".content")) > 20, what="the answer streaming")
        assert any(s["busy"] for s in slow_server.get("/slots").json())
        if how == "button":
            browser.find_element("id", "stop").click()
        else:
            browser.find_element("tag name", "body").send_keys(Keys.ESCAPE)
        reply = wait_reply(browser, timeout=5)
        assert "stopped" in text_of(reply, ".figures")
        assert slots_free(slow_server), "the slot stays busy after the stop"
        assert wait_new_log(slow_server, before, r"^POST /v1/chat/completions 200 .*\| client disconnected")
        shown = text_of(reply, ".content")
        assert 0 < len(shown) and "word399" not in shown
        time.sleep(0.2)
        assert text_of(last_reply(browser), ".content") == shown, "the answer grew after the stop"
        assert browser.find_element("id", "send").is_displayed()


def test_conversations_are_kept_across_a_reload(browser, server):
    open_page(browser, server)
    send(browser, "Remember the tangerine.", answer("Tangerine noted."))
    wait_reply(browser)
    send(browser, "And the plum.", answer("Plum noted too."))
    second = wait_reply(browser)
    # The second turn continues the first one's state: its prompt was cached.
    assert int(second.find_element("css selector", ".figures").get_attribute("data-cached")) > 0
    assert "cached" in text_of(second, ".figures")
    browser.find_element("id", "new-chat").click()
    send(browser, "Another topic.", answer("Sure."))
    wait_reply(browser)
    browser.refresh()
    wait(browser, lambda d: js(d, "return document.body.dataset.ready === '1'"))
    titles = [e.get_attribute("textContent") for e in browser.find_elements("css selector", "#conversations .open")]
    assert titles == ["Another topic.", "Remember the tangerine."]
    browser.find_elements("css selector", "#conversations .open")[1].click()
    bubbles = [e.text for e in browser.find_elements("css selector", "#messages .msg.user .bubble")]
    answers = [text_of(e, ".content") for e in browser.find_elements("css selector", "#messages .msg.assistant")]
    assert bubbles == ["Remember the tangerine.", "And the plum."]
    assert answers == ["Tangerine noted.", "Plum noted too."]
    # A deleted conversation is gone after the next reload too.
    from selenium.webdriver.common.action_chains import ActionChains
    first = browser.find_elements("css selector", "#conversations li")[0]
    ActionChains(browser).move_to_element(first).perform()  # the delete button shows on hover
    first.find_element("css selector", ".delete").click()
    browser.refresh()
    wait(browser, lambda d: js(d, "return document.body.dataset.ready === '1'"))
    titles = [e.get_attribute("textContent") for e in browser.find_elements("css selector", "#conversations .open")]
    assert titles == ["Remember the tangerine."]


def test_model_output_is_text_never_markup(browser, server):
    payload = ('<img src=x onerror=alert(1)> <script>alert(2)</script> '
               '<b onmouseover=alert(3)>bold?</b> [click](javascript:alert(4)) ![i](javascript:alert(5))')
    open_page(browser, server)
    js(browser, "window.__before = document.querySelectorAll('*').length")
    send(browser, '<img src=y onerror="alert(6)">',
         "<|content_thinking|><svg onload=alert(7)></svg><|end_message|><|message_model|>"
         f"<|content_text|>{payload}\n\n```html\n<script>alert(8)</script>\n```<|end_message|>"
         "<|content_model_end_sampling|>")
    reply = wait_reply(browser)
    time.sleep(0.3)  # an onerror would have fired by now
    from selenium.common.exceptions import NoAlertPresentException
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text
    content = text_of(reply, ".content")
    assert "<img src=x onerror=alert(1)>" in content and "<script>alert(2)</script>" in content
    assert "<b onmouseover=alert(3)>bold?</b>" in content
    assert "click" in content and "javascript" not in " ".join(
        a.get_attribute("href") or "" for a in browser.find_elements("css selector", "#messages a"))
    assert text_of(reply, "pre code") == "<script>alert(8)</script>"
    assert text_of(reply, ".reasoning-text") == "<svg onload=alert(7)></svg>"
    user = browser.find_element("css selector", "#messages .msg.user .bubble").text
    assert user == '<img src=y onerror="alert(6)">'
    counts = js(browser, """
        const m = document.getElementById('messages');
        return {img: m.querySelectorAll('img').length, script: document.querySelectorAll('script').length,
                svg: m.querySelectorAll('svg').length, b: m.querySelectorAll('b').length,
                handlers: [...document.querySelectorAll('*')].filter(e => [...e.attributes].some(a => a.name.startsWith('on'))).length};
    """)
    assert counts == {"img": 0, "script": 1, "svg": 0, "b": 0, "handlers": 0}
    title = browser.find_element("css selector", "#conversations .open").get_attribute("textContent")
    assert title == '<img src=y onerror="alert(6)">'
    assert console_errors(browser) == []


def test_markdown_answers(browser, server):
    text = ("## Plan\n\nSome *emphasis*, **strong**, ~~gone~~ and `code`, see [the docs](https://example.com/x).\n\n"
            "- one\n- two\n  - nested\n\n1. first\n2. second\n\n| a | b |\n|---|--:|\n| 1 | 2 |\n\n"
            "> quoted\n\n```python\nprint('hi')\n```\n")
    open_page(browser, server)
    send(browser, "Format things.", answer(text))
    reply = wait_reply(browser)
    md = reply.find_element("css selector", ".content")
    assert text_of(md, "h2") == "Plan"
    assert text_of(md, "em") == "emphasis" and text_of(md, "strong") == "strong" and text_of(md, "del") == "gone"
    assert text_of(md, "p code") == "code"
    a = md.find_element("css selector", "a")
    assert a.get_attribute("href") == "https://example.com/x" and a.get_attribute("rel") == "noopener noreferrer"
    assert js(browser, "return [...arguments[0].querySelectorAll(':scope > ul > li')].map(li => li.firstChild.textContent)",
              md) == ["one", "two"]
    assert text_of(md, "ul ul li") == "nested"
    assert [e.get_attribute("textContent") for e in md.find_elements("css selector", "ol > li")] == ["first", "second"]
    assert [e.get_attribute("textContent") for e in md.find_elements("css selector", "th")] == ["a", "b"]
    assert [e.get_attribute("textContent") for e in md.find_elements("css selector", "td")] == ["1", "2"]
    assert text_of(md, "blockquote") == "quoted"
    assert text_of(md, "pre code") == "print('hi')"
    assert text_of(md, ".code-bar .code-lang") == "python"
    assert md.find_element("css selector", ".code-bar .copy").is_displayed()


def test_settings_go_into_the_request(browser, server):
    from selenium.webdriver.support.ui import Select
    open_page(browser, server)
    browser.find_element("id", "settings-toggle").click()
    browser.find_element("id", "system-prompt").send_keys("Be brief.")
    Select(browser.find_element("id", "effort")).select_by_value("low")
    assert [o.get_attribute("value") for o in browser.find_elements("css selector", "#effort option")] == \
        ["", "none", "minimal", "low", "medium", "high", "xhigh", "max"]
    for field, value in (("temperature", "0.5"), ("top-p", "0.9"), ("max-tokens", "40")):
        browser.find_element("id", field).send_keys(value)
    browser.find_element("id", "input").click()  # the last field's change event
    js(browser, """
        window.__bodies = [];
        const real = window.fetch;
        window.fetch = (url, init) => { if (init && init.body) window.__bodies.push(JSON.parse(init.body)); return real(url, init); };
    """)
    send(browser, "Hello.", answer("Hi."))
    reply = wait_reply(browser)
    assert text_of(reply, ".content") == "Hi."
    body = js(browser, "return window.__bodies[0]")
    assert body["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello."}]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert (body["reasoning_effort"], body["temperature"], body["top_p"], body["max_tokens"]) == ("low", 0.5, 0.9, 40)
    # The settings are kept for the next visit.
    browser.refresh()
    wait(browser, lambda d: js(d, "return document.body.dataset.ready === '1'"))
    assert browser.find_element("id", "effort").get_attribute("value") == "low"
    assert browser.find_element("id", "max-tokens").get_attribute("value") == "40"
    # Shift+Enter breaks the line instead of sending.
    from selenium.webdriver.common.keys import Keys
    box = browser.find_element("id", "input")
    box.send_keys("line one", Keys.SHIFT, Keys.ENTER, Keys.SHIFT, "line two")
    assert box.get_attribute("value") == "line one\nline two"
    assert len(browser.find_elements("css selector", "#messages .msg.user")) == 0


def test_api_key_is_asked_once(browser, keyed_server):
    open_page(browser, keyed_server)
    dialog = browser.find_element("id", "key-dialog")
    wait(browser, lambda d: dialog.get_attribute("open") is not None, what="the key dialog")
    assert "API key" in browser.find_element("id", "key-message").text
    key = browser.find_element("id", "key-input")
    key.send_keys("wrong-key")
    browser.find_element("id", "key-submit").click()
    wait(browser, lambda d: "refused" in d.find_element("id", "key-message").text, what="the refusal")
    assert dialog.get_attribute("open") is not None
    key.send_keys("sekrit-key")
    browser.find_element("id", "key-submit").click()
    wait(browser, lambda d: dialog.get_attribute("open") is None, what="the dialog to close")
    assert browser.find_element("id", "model-name").text == "tiny"
    browser.find_element("id", "settings-toggle").click()
    browser.find_element("id", "max-tokens").send_keys("3")
    send(browser, "Hello with a key.")  # no script: this server runs without --test-scripts
    reply = wait_reply(browser)
    assert text_of(reply, ".error") == ""
    assert reply.find_element("css selector", ".figures").get_attribute("data-generated") == "3"
    assert "cut off at the token limit" in text_of(reply, ".figures")
    # Kept for the session: a reload does not ask again.
    browser.refresh()
    wait(browser, lambda d: js(d, "return document.body.dataset.ready === '1'"))
    wait(browser, lambda d: d.find_element("id", "model-name").text == "tiny", what="the model name")
    assert browser.find_element("id", "key-dialog").get_attribute("open") is None
    assert console_errors(browser, allow=("401",)) == []


def test_test_scripts_are_refused_outside_test_mode(browser, keyed_server):
    open_page(browser, keyed_server, fresh=True)
    js(browser, "sessionStorage.setItem('inkling.api_key', 'sekrit-key')")
    browser.refresh()
    wait(browser, lambda d: d.find_element("id", "model-name").text == "tiny", what="the model name")
    send(browser, "Script?", answer("scripted"))
    reply = wait_reply(browser)
    assert "test-only field" in text_of(reply, ".error")
    assert text_of(reply, ".content") == ""


def test_layouts_and_screenshots(browser, server):
    open_page(browser, server)
    send(browser, "Weather in Paris, in a table?", REASONING_TEXT_TWO_CALLS)
    wait_reply(browser)
    send(browser, "And as a table?",
         answer("| city | sky |\n|---|---|\n| Paris | *sunny* |\n\n```json\n{\"city\": \"Paris\"}\n```",
                reasoning="A small table will do."))
    wait_reply(browser)
    js(browser, "document.querySelectorAll('#messages .reasoning').forEach(r => r.open = true)")
    rect = lambda selector: js(browser, f"return document.querySelector('{selector}').getBoundingClientRect().toJSON()")
    # Desktop: the list beside the conversation.
    assert rect("#sidebar")["width"] > 200 and rect("#sidebar")["left"] == 0
    assert not browser.find_element("id", "menu").is_displayed()
    browser.save_screenshot(str(SCREENSHOTS / "desktop.png"))
    browser.find_element("id", "settings-toggle").click()
    assert browser.find_element("id", "system-prompt").is_displayed()
    browser.save_screenshot(str(SCREENSHOTS / "desktop-settings.png"))
    browser.find_element("id", "settings-toggle").click()
    # Phone: the list is a drawer behind the menu button; nothing overflows sideways.
    browser.set_window_size(*PHONE)
    wait(browser, lambda d: d.find_element("id", "menu").is_displayed() and rect("#sidebar")["right"] <= 0,
         what="the phone layout (the list out of view)")
    assert js(browser, "return document.documentElement.scrollWidth <= window.innerWidth")
    assert rect("#composer")["right"] <= js(browser, "return window.innerWidth")
    browser.save_screenshot(str(SCREENSHOTS / "phone.png"))
    browser.find_element("id", "menu").click()
    wait(browser, lambda d: rect("#sidebar")["left"] >= 0, what="the drawer to open")
    browser.save_screenshot(str(SCREENSHOTS / "phone-conversations.png"))
    browser.find_element("id", "new-chat").click()
    assert len(browser.find_elements("css selector", "#messages .msg")) == 0
    browser.set_window_size(*DESKTOP)
    for name in ("desktop.png", "desktop-settings.png", "phone.png", "phone-conversations.png"):
        assert (SCREENSHOTS / name).stat().st_size > 10000, name


MARKDOWN_CASES = [
    ("", ""),
    ("plain", "<p>plain</p>"),
    ("a\nb", "<p>a<br>b</p>"),
    ("**open", "<p>**open</p>"),
    ("*a **b** c*", "<p><em>a <strong>b</strong> c</em></p>"),
    ("snake_case_name and 2 * 3", "<p>snake_case_name and 2 * 3</p>"),
    ("`a <b> c`", "<p><code>a &lt;b&gt; c</code></p>"),
    ("``x ` y``", "<p><code>x ` y</code></p>"),
    ("\\*not em\\*", "<p>*not em*</p>"),
    ("<script>x</script>", "<p>&lt;script&gt;x&lt;/script&gt;</p>"),
    ("[a](javascript:alert(1))", "<p>a</p>"),
    ("[a](data:text/html,x)", "<p>a</p>"),
    ("[a [b]](https://x.org/(y))", '<p><a href="https://x.org/(y)" target="_blank" rel="noopener noreferrer">a [b]</a></p>'),
    ("see https://x.org/a.", '<p>see <a href="https://x.org/a" target="_blank" rel="noopener noreferrer">https://x.org/a</a>.</p>'),
    ("```\nopen fence\n<b>", "<pre><code>open fence\n&lt;b&gt;</code></pre>"),
    ("~~~js\nx\n~~~", '<pre><code data-lang="js">x</code></pre>'),
    ("# T\n---\n> q", "<h1>T</h1><hr><blockquote><p>q</p></blockquote>"),
    ("#nohash", "<p>#nohash</p>"),
    ("- a\n\n- b", "<ul><li><p>a</p></li><li><p>b</p></li></ul>"),
    ("3. c\n4. d", '<ol start="3"><li>c</li><li>d</li></ol>'),
    ("- a\n  - b\n    - c", "<ul><li>a<ul><li>b<ul><li>c</li></ul></li></ul></li></ul>"),
    ("| a | b |\n|---|---|\n| 1 |", "<div class=\"table-wrap\"><table><thead><tr><th>a</th><th>b</th></tr></thead>"
                                   "<tbody><tr><td>1</td><td></td></tr></tbody></table></div>"),
    ("a | b", "<p>a | b</p>"),
]


def test_markdown_renderer_cases(browser, server):
    """The renderer on its own: exact DOM for small inputs, and random punctuation soup that must
    neither throw nor produce an element outside the renderer's set."""
    open_page(browser, server)
    results = browser.execute_async_script("""
        const done = arguments[arguments.length - 1];
        const cases = arguments[0];
        import('/page/markdown.js').then((m) => {
          const html = (text) => { const d = document.createElement('div'); d.appendChild(m.renderMarkdown(text)); return d; };
          const exact = cases.map((text) => html(text).innerHTML);
          const allowed = new Set(['P','BR','EM','STRONG','DEL','CODE','PRE','A','H1','H2','H3','H4','H5','H6','HR',
                                   'BLOCKQUOTE','UL','OL','LI','TABLE','THEAD','TBODY','TR','TH','TD','DIV']);
          const pieces = ['*', '**', '_', '`', '```', '~~', '[', ']', '(', ')', '<', '>', '|', '-', '1.', '#', '\\\\',
                          '\\n', '\\n\\n', '  ', 'x', 'http://a.b', '<img src=x>', '---', '![a](b)', '[a](http://c)'];
          let seed = 7;
          const bad = [];
          const rand = (n) => (seed = (seed * 1103515245 + 12345) % 2147483648) % n;
          for (let k = 0; k < 400; k++) {
            let text = '';
            for (let j = rand(40); j > 0; j--) text += pieces[rand(pieces.length)];
            try {
              for (const e of html(text).querySelectorAll('*')) if (!allowed.has(e.tagName)) bad.push([text, e.tagName]);
            } catch (e) { bad.push([text, String(e)]); }
          }
          done({exact, bad});
        });
    """, [c[0] for c in MARKDOWN_CASES])
    for (text, expected), got in zip(MARKDOWN_CASES, results["exact"]):
        assert got == expected, f"{text!r}"
    assert results["bad"] == []


def test_the_browser_enforces_the_policy(browser, server):
    """The header is not decoration: chromium refuses an injected inline script and a remote fetch."""
    open_page(browser, server)
    result = browser.execute_async_script("""
        const done = arguments[arguments.length - 1];
        const s = document.createElement('script');
        s.textContent = 'window.__inline = 1';
        document.body.appendChild(s);
        fetch('http://192.0.2.1/x').then(() => done({inline: window.__inline ?? null, remote: 'fetched'}),
                                         (e) => done({inline: window.__inline ?? null, remote: e.name}));
    """)
    assert result == {"inline": None, "remote": "TypeError"}
    messages = " ".join(console_errors(browser))
    assert "Content Security Policy" in messages and "script-src" in messages and "connect-src" in messages


def test_copy_buttons(browser, server):
    open_page(browser, server)
    browser.execute_cdp_cmd("Browser.grantPermissions", {"origin": server.url,
                                                         "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]})
    send(browser, "Copy me.", answer("Use `ls`:\n\n```sh\nls -la\n```"))
    reply = wait_reply(browser)
    read = "const done = arguments[arguments.length - 1]; navigator.clipboard.readText().then(done, (e) => done('error: ' + e))"
    code_copy = reply.find_element("css selector", ".code-bar .copy")
    code_copy.click()
    wait(browser, lambda d: code_copy.text == "Copied", what="the code's copy button to confirm")
    assert browser.execute_async_script(read) == "ls -la"
    answer_copy = reply.find_element("css selector", ".msg-foot .copy")
    answer_copy.click()
    wait(browser, lambda d: answer_copy.text == "Copied", what="the answer's copy button to confirm")
    assert browser.execute_async_script(read) == "Use `ls`:\n\n```sh\nls -la\n```"
