"""The web view (`prunestore serve`) driven in a real headless Chromium, as an operator would use it.

The server runs as the command, in its own process, on stores filled by the
demo, under a budget, and with hostile names and content. Each test checks
what a person would see against the store's own answers (`messages`, `live`,
`explain`, `history`), and leaves a screenshot of the page it looked at.
"""

from __future__ import annotations

import json
import urllib.request
from itertools import pairwise
from pathlib import Path
from urllib.parse import quote, urlencode

import pytest
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select
from webpages import chromium, follow, navigation, screenshot_dir, serving

from prunestore import Message, Policy, PruneStore
from prunestore.showcase.demo import run_demo
from prunestore.showcase.workloads import generate
from prunestore.web.app import MESSAGE_CHARS, PAGE_SIZE, PROMPT_WINDOW, ROW_CHARS, WINDOW
from prunestore.web.chart import per_turn

ROWS = """return Array.from(document.querySelectorAll('#messages .msg')).map(e => ({
    seq: Number(e.dataset.seq), verdict: e.dataset.verdict, role: e.querySelector('.role').textContent,
    id: e.querySelector('.id').textContent, text: e.querySelector('.text').textContent,
    shown: e.querySelector('.text').checkVisibility()}))"""


@pytest.fixture(scope="module")
def browser():
    driver = chromium()
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    return screenshot_dir(tmp_path_factory)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """A SQLite store filled by the demo (each workload at 50 and 200 turns), served; yields (store, address)."""
    url = f"sqlite:///{tmp_path_factory.mktemp('demo') / 'demo.db'}"
    with PruneStore(url) as store:
        for _ in run_demo(store, sizes=(50, 200)):
            pass
        with serving(url) as (base, _):
            yield store, base


def session_url(base: str, name: str, **params: object) -> str:
    return f"{base}/session?{urlencode({'name': name, **params}, quote_via=quote)}"


def read_session(browser) -> list[dict]:
    """Every row of the session open in the browser, following its "next" links to the end."""
    rows: list[dict] = []
    while True:
        rows += browser.execute_script(ROWS)
        following = browser.find_elements(By.ID, "next")
        if not following:
            return rows
        follow(browser, following[0])


def no_alert(browser) -> None:
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert  # noqa: B018 (the property raises when no dialog is open)


@pytest.mark.parametrize("name", ["agent-200", "rag-200", "chat-50"])
def test_session_view_rows_and_verdicts_equal_messages_and_live(demo, browser, shots, name):
    store, base = demo
    browser.get(base + "/")
    follow(browser, browser.find_element(By.LINK_TEXT, name))
    assert browser.find_element(By.ID, "session-name").text == name
    browser.save_screenshot(str(shots / f"session-{name}.png"))
    rows = read_session(browser)
    stored = store.messages(name)
    assert [(r["seq"], r["id"], r["role"], r["verdict"]) for r in rows] == [
        (m.seq, m.id, m.role, m.verdict) for m in stored
    ]
    # As the model sees it: the text of live messages shows, pruned ones are folded.
    assert [r["id"] for r in rows if r["shown"]] == [m.id for m in store.live(name)]

    browser.get(session_url(base, name))
    follow(browser, browser.find_element(By.ID, "toggle"))  # show everything
    everything = read_session(browser)
    assert all(r["shown"] for r in everything)
    assert [r["text"] for r in everything] == [m.content[:ROW_CHARS] for m in stored]


def test_a_restored_message_links_to_its_explanation_and_on(demo, browser, shots):
    store, base = demo
    name = "agent-200"
    restored = next(m for m in store.messages(name) if m.verdict == "restored")
    why = store.explain(name, restored.id)
    assert why.needed_by
    browser.get(session_url(base, name, after=(restored.seq - 1) // 100 * 100))
    row = browser.find_element(By.ID, f"m{restored.seq}")
    assert "restored: it defines" in row.text
    follow(browser, row.find_element(By.CSS_SELECTOR, "a.why"))  # "... which live messages refer to"
    assert browser.find_element(By.ID, "message-id").text == restored.id
    browser.save_screenshot(str(shots / "message-restored.png"))
    assert [a.text for a in browser.find_elements(By.CSS_SELECTOR, "#needed-by a")] == list(why.needed_by)
    assert browser.find_element(By.ID, "needed-for").text == ", ".join(why.needed_for)
    superseded_by = browser.find_elements(By.CSS_SELECTOR, "#superseded-by a")
    assert [a.text for a in superseded_by] == ([why.superseded_by] if why.superseded_by else [])

    follow(browser, browser.find_element(By.CSS_SELECTOR, "#needed-by a"))
    assert browser.find_element(By.ID, "message-id").text == why.needed_by[0]
    user = store.messages(name, ids=[why.needed_by[0]])[0]
    assert browser.find_element(By.CSS_SELECTOR, "h1 .verdict").text == user.verdict
    follow(browser, browser.find_element(By.ID, "back"))  # to the window holding it
    assert browser.find_element(By.ID, f"m{user.seq}").get_attribute("data-verdict") == user.verdict


def test_a_superseded_and_a_duplicate_message_link_to_their_cause(demo, browser):
    store, base = demo
    stored = store.messages("rag-200") + store.messages("agent-200")
    for verdict, field, css in (
        ("superseded", "superseded_by", "#superseded-by a"),
        ("duplicate", "duplicate_of", "#duplicate-of a"),
    ):
        message = next(m for m in stored if m.verdict == verdict)
        session = "rag-200" if message in store.messages("rag-200") else "agent-200"
        cause = getattr(store.explain(session, message.id), field)
        browser.get(f"{base}/message?{urlencode({'session': session, 'id': message.id}, quote_via=quote)}")
        follow(browser, browser.find_element(By.CSS_SELECTOR, css))
        assert browser.find_element(By.ID, "message-id").text == cause


def test_the_chart_has_one_point_per_turn(demo, browser, shots):
    store, base = demo
    name = "agent-200"
    browser.get(session_url(base, name))
    follow(browser, browser.find_element(By.ID, "chart"))
    browser.save_screenshot(str(shots / "chart.png"))
    stored = store.messages(name)
    turns = sorted({m.turn for m in stored})
    points = browser.find_elements(By.CSS_SELECTOR, "#tokens-chart circle.point")
    assert [int(p.get_attribute("data-turn")) for p in points] == turns
    for line in ("before", "after"):
        assert len(browser.find_element(By.ID, line).get_attribute("points").split()) == len(turns)
    summary = store.summary(name)
    last = points[-1]
    assert (int(last.get_attribute("data-tokens")), int(last.get_attribute("data-live-tokens"))) == (
        summary.tokens,
        summary.live_tokens,
    )
    # Each turn's point is the prompt after that turn: the tokens of the messages live then.
    assert [int(p.get_attribute("data-live-tokens")) for p in points] == [
        p.live_tokens for p in per_turn(store.history(name))
    ]
    assert not browser.find_elements(By.ID, "budget")


def test_the_sessions_page_lists_counts_and_searches_by_prefix(demo, browser, shots):
    store, base = demo
    browser.get(base + "/")
    browser.save_screenshot(str(shots / "sessions.png"))
    rows = browser.find_elements(By.CSS_SELECTOR, "#sessions tr.session")
    shown = [[td.text for td in row.find_elements(By.TAG_NAME, "td")][:5] for row in rows]
    assert shown == [
        [s.name, f"{s.messages:,}", f"{s.tokens:,}", f"{s.live_tokens:,}", f"{s.reduction:.1%}"]
        for s in store.summaries()
    ]
    search = browser.find_element(By.NAME, "prefix")
    with navigation(browser):
        search.send_keys("rag", Keys.ENTER)
    names = [a.text for a in browser.find_elements(By.CSS_SELECTOR, "#sessions td.name a")]
    assert names == store.sessions("rag") == ["rag-200", "rag-50"]


def test_a_budget_shows_its_line_and_removal_events(tmp_path, browser, shots):
    url = f"sqlite:///{tmp_path / 'budget.db'}"
    with PruneStore(url, policy=Policy(budget=6000, clear_at_least=3000)) as store:
        for messages in generate("agent", 120).by_turn():
            store.append("agent", messages)
        history = per_turn(store.history("agent"))
        stored = store.messages("agent")
    event_turns = [b.turn for a, b in pairwise(history) if b.events > a.events]
    assert event_turns  # the workload outgrows the budget
    with serving(url) as (base, _):
        browser.get(f"{base}/chart?session=agent")
        browser.save_screenshot(str(shots / "chart-budget.png"))
        assert browser.find_elements(By.ID, "budget")
        events = browser.find_elements(By.CSS_SELECTOR, "#tokens-chart line.event")
        assert [int(e.get_attribute("data-turn")) for e in events] == [t for t in event_turns if t != history[0].turn]
        browser.get(session_url(base, "agent"))
        rows = read_session(browser)
    assert [(r["id"], r["verdict"]) for r in rows] == [(m.id, m.verdict) for m in stored]
    verdicts = {r["verdict"] for r in rows}
    assert {"evicted", "pending"} <= verdicts  # the budget's own verdicts show
    # Evicted messages are out of the prompt, so folded; pending ones are still in it.
    assert all(not r["shown"] for r in rows if r["verdict"] == "evicted")
    assert all(r["shown"] for r in rows if r["verdict"] == "pending")


def test_a_policy_with_prices_shows_the_ledger_on_the_sessions_and_session_pages(tmp_path, browser, shots):
    url = f"sqlite:///{tmp_path / 'priced.db'}"
    policy = Policy(budget=6000, clear_at_least=3000, prices="anthropic-1h")
    with PruneStore(url, policy=policy) as store:
        for name, turns in (("agent", 120), ("short", 10)):
            for messages in generate("agent", turns).by_turn():
                store.append(name, messages)
        ledgers = {name: store.stats(name) for name in ("agent", "short")}
        turns = len(per_turn(store.history("agent")))
    with serving(url) as (base, _):
        browser.get(base + "/")
        browser.save_screenshot(str(shots / "sessions-ledger.png"))
        shown = {
            row.find_element(By.CSS_SELECTOR, ".name").text: (
                row.find_element(By.CSS_SELECTOR, ".cost").text,
                row.find_element(By.CSS_SELECTOR, ".everything").text,
            )
            for row in browser.find_elements(By.CSS_SELECTOR, "#sessions tr.session")
        }
        assert shown == {n: (f"{s.cost:,.0f}", f"{s.cost_everything:,.0f}") for n, s in ledgers.items()}
        browser.get(session_url(base, "agent"))
        agent = ledgers["agent"]
        assert browser.find_element(By.CSS_SELECTOR, "#cost b").text == f"{agent.cost:,.0f}"
        everything = browser.find_element(By.ID, "cost-everything").text
        assert everything.startswith(f"{agent.cost_everything:,.0f}")
        assert f"({agent.cost_everything / agent.cost:.2f}x)" in everything
        browser.find_element(By.ID, "chart").click()
        browser.save_screenshot(str(shots / "chart-cost.png"))
        drawn = browser.find_element(By.ID, "cost-chart")
        assert float(drawn.get_attribute("data-cost")) == pytest.approx(agent.cost)
        assert float(drawn.get_attribute("data-cost-everything")) == pytest.approx(agent.cost_everything)
        lines = {
            line: [float(xy.split(",")[1]) for xy in browser.find_element(By.ID, line).get_attribute("points").split()]
            for line in ("cost-line", "cost-everything-line")
        }
    for ys in lines.values():  # one point a turn, the cost so far never falling (a smaller y is higher)
        assert len(ys) == turns
        assert ys == sorted(ys, reverse=True)
    assert lines["cost-line"][-1] > lines["cost-everything-line"][-1]
    assert agent.cost < agent.cost_everything  # the budget keeps the prompt a cached prefix between events


WIRE = """return Array.from(document.querySelectorAll('#wire .msg.wire')).map(e => ({
    role: e.dataset.role,
    parts: Array.from(e.querySelectorAll('.part')).map(p => [p.dataset.kind, p.dataset.call || null])}))"""


def _wire_parts(rendered, fmt: str) -> list[dict]:
    """What the page should show for `rendered`: each message's role and (kind, call id) parts."""
    placeholder = ("[result pruned", "[no result")
    shown = []
    if fmt == "anthropic" and rendered.system:
        shown.append({"role": "system", "parts": [["text", None]]})
    for m in rendered.messages:
        if m["role"] == "tool":
            kind = "placeholder" if str(m["content"]).startswith(placeholder) else "result"
            shown.append({"role": "tool", "parts": [[kind, m["tool_call_id"]]]})
            continue
        content = m.get("content")
        blocks = [{"type": "text"}] if isinstance(content, str) else content or []
        parts = []
        if fmt == "openai":
            parts = [["text", None]] if content not in (None, "", []) else []
            parts += [["call", c["id"]] for c in m.get("tool_calls") or []]
        for block in blocks if fmt == "anthropic" else []:
            if block.get("type") == "tool_use":
                parts.append(["call", block["id"]])
            elif block.get("type") == "tool_result":
                text = block.get("content", "")
                kind = "placeholder" if isinstance(text, str) and text.startswith(placeholder) else "result"
                parts.append([kind, block["tool_use_id"]])
            else:
                parts.append(["text", None])
        shown.append({"role": m["role"], "parts": parts})
    return shown


def test_the_prompt_page_shows_what_render_gives(tmp_path, browser, shots):
    """The OpenAI and Anthropic fixtures, and a store under a budget: each page is render()'s prompt, part by part,
    and lists every call the prompt leaves out."""
    from prunestore import from_anthropic, from_openai

    fixtures = Path(__file__).parent / "fixtures"
    url = f"sqlite:///{tmp_path / 'prompts.db'}"
    with PruneStore(url, policy=Policy(budget=3000, clear_at_least=1000)) as store:
        store.append("openai", from_openai(json.loads((fixtures / "openai_agent.json").read_text())))
        transcript = json.loads((fixtures / "anthropic_agent.json").read_text())
        store.append("anthropic", from_anthropic(transcript["messages"], transcript.get("system")))
        expected = {
            (name, fmt, placeholders): store.render(name, fmt, dropped="placeholder" if placeholders else "omit")
            for name in ("openai", "anthropic")
            for fmt in ("openai", "anthropic")
            for placeholders in (False, True)
        }
    assert any(r.report.calls_removed for r in expected.values())
    with serving(url) as (base, _):
        for (name, fmt, placeholders), rendered in expected.items():
            query = urlencode({"session": name, "format": fmt, **({"placeholders": "1"} if placeholders else {})})
            browser.get(f"{base}/prompt?{query}")
            if (name, fmt, placeholders) == ("openai", "openai", False):
                browser.save_screenshot(str(shots / "prompt.png"))
            assert browser.execute_script(WIRE) == _wire_parts(rendered, fmt), (name, fmt, placeholders)
            left = browser.find_elements(By.CSS_SELECTOR, "#left-out li.left-out")
            assert len(left) == rendered.report.calls_removed
            for item in left[:5]:  # each names its cause with a link to a stored message
                assert item.find_elements(By.CSS_SELECTOR, "a.ref")
        browser.get(session_url(base, "openai"))
        follow(browser, browser.find_element(By.ID, "prompt"))
        assert browser.find_element(By.ID, "format").text == "openai"


def test_a_long_prompt_pages_through_its_windows_and_shows_all(tmp_path, browser):
    """Next and last lead through the windows of the prompt, in render's order; "Show all" lays out every message."""
    url = f"sqlite:///{tmp_path / 'long.db'}"
    with PruneStore(url) as store:
        store.append("long", [Message(f"m{i}", "user", f"line {i}", i) for i in range(PROMPT_WINDOW + 120)])
        sent = store.render("long", "openai").messages
    read = "return Array.from(document.querySelectorAll('#wire .msg.wire')).map(e => +e.dataset.index)"
    with serving(url) as (base, _):
        browser.get(f"{base}/prompt?session=long")
        assert browser.execute_script(read) == list(range(PROMPT_WINDOW))
        follow(browser, browser.find_element(By.ID, "next"))
        assert browser.execute_script(read) == list(range(PROMPT_WINDOW, len(sent)))
        assert browser.find_element(By.ID, "range").text == f"messages {PROMPT_WINDOW + 1}–{len(sent)} of {len(sent)}"
        texts = "return Array.from(document.querySelectorAll('#wire .part[data-kind=text]')).map(e => e.textContent)"
        assert browser.execute_script(texts) == [m["content"] for m in sent[PROMPT_WINDOW:]]
        follow(browser, browser.find_element(By.ID, "all"))
        assert browser.execute_script(read) == list(range(len(sent)))
        follow(browser, browser.find_element(By.ID, "paged"))
        assert browser.execute_script(read) == list(range(PROMPT_WINDOW))


HOSTILE_NAMES = ["a/b?c#d%e", "100% & more", "<b>bold</b>", "שלום עולם", "x=1&y=2", "..", "%2F", "tab\there"]
SCRIPT = "<script>alert('pwned')</script><img src=x onerror=\"alert('img')\">"


def hostile_messages() -> list[Message]:
    return [
        Message("html", "user", SCRIPT, turn=1),
        Message("nul", "user", "before\x00after", turn=1),
        Message("big", "tool_output", "x" * (1024 * 1024), turn=2, tool_key="big"),
        Message("rtl", "assistant", "\u202e" + "טקסט מימין לשמאל " * 50, turn=2),
        Message(
            "<i>id</i>", "user", "an id with markup", turn=3, metadata={"note": "</script><script>alert(1)</script>"}
        ),
        Message("big2", "tool_output", "superseding", turn=3, tool_key="big"),
    ]


def test_hostile_names_and_content_render_escaped_and_stay_usable(tmp_path, browser, shots):
    url = f"sqlite:///{tmp_path / 'hostile.db'}"
    with PruneStore(url) as store:
        for name in HOSTILE_NAMES:
            store.append(name, hostile_messages())
        for i in range(PAGE_SIZE + 5):  # more than a page
            store.append(f"filler-{i:03}", [Message("m", "user", "hello", turn=0)])
        names = store.sessions()
    with serving(url) as (base, _):
        browser.get(base + "/")
        seen: list[str] = []
        while True:
            seen += [a.text for a in browser.find_elements(By.CSS_SELECTOR, "#sessions td.name a")]
            following = browser.find_elements(By.ID, "next")
            if not following:
                break
            follow(browser, following[0])
        assert seen == [n.replace("\t", "\u2409") for n in names]

        for name in HOSTILE_NAMES:
            browser.get(base + "/?" + urlencode({"prefix": name}, quote_via=quote))
            follow(browser, browser.find_element(By.CSS_SELECTOR, "#sessions td.name a"))
            no_alert(browser)
            assert browser.find_element(By.ID, "session-name").text == name.replace("\t", "\u2409")
            rows = browser.execute_script(ROWS)
            assert [r["id"] for r in rows] == [m.id for m in hostile_messages()]
            text = {r["id"]: r["text"] for r in rows}
            assert text["html"] == SCRIPT
            assert text["nul"] == "before\u2400after"
            assert len(text["big"]) == ROW_CHARS
            assert browser.execute_script("return document.querySelectorAll('script, img').length") == 0
            width = browser.execute_script("return [document.documentElement.scrollWidth, window.innerWidth]")
            assert width[0] <= width[1]  # nothing pushes the page sideways
        browser.save_screenshot(str(shots / "session-hostile.png"))

        name = HOSTILE_NAMES[0]
        follow(browser, browser.find_element(By.LINK_TEXT, "#3"))  # the 1 MiB message
        assert len(browser.find_element(By.ID, "content").text) == MESSAGE_CHARS
        whole = browser.find_element(By.ID, "whole").get_attribute("href")
        with urllib.request.urlopen(whole) as response:
            assert response.read().decode() == "x" * (1024 * 1024)
        with navigation(browser):
            browser.back()
        follow(browser, browser.find_element(By.LINK_TEXT, "#5"))  # an id and metadata with markup
        no_alert(browser)
        assert browser.find_element(By.ID, "message-id").text == "<i>id</i>"
        assert "</script><script>alert(1)</script>" in browser.find_element(By.ID, "fields").text
        browser.save_screenshot(str(shots / "message-hostile.png"))
        browser.get(f"{base}/chart?{urlencode({'session': name}, quote_via=quote)}")
        assert browser.find_element(By.CSS_SELECTOR, "h1 bdi").text == name


LONG_NAME = "session-" + "x" * 181  # 189 characters, no space to break at
LONG_KEY = "search:" + "k" * 300


@pytest.mark.parametrize("width", [420, 1366])
def test_long_names_and_keys_never_push_a_page_sideways(tmp_path, browser, shots, width):
    url = f"sqlite:///{tmp_path / 'long.db'}"
    with PruneStore(url) as store:
        store.append(
            LONG_NAME,
            [
                Message("q", "user", "look it up", 1),
                Message("r1", "tool_output", "first", 1, tool_key=LONG_KEY),
                Message("r2", "tool_output", "second", 2, tool_key=LONG_KEY),
                Message(LONG_KEY, "user", "said, then erased", 2),
            ],
        )
        store.erase(LONG_NAME, LONG_KEY)
    browser.set_window_size(width, 900)
    try:
        with serving(url) as (base, _):
            name = quote(LONG_NAME)
            for path in (
                "/",
                f"/session?session={name}",
                f"/message?session={name}&id=r1",
                f"/chart?session={name}",
                f"/prompt?session={name}",
                f"/erasures?session={name}",
            ):
                browser.get(base + path)
                browser.save_screenshot(str(shots / f"long-{width}-{path.split('?')[0].strip('/') or 'sessions'}.png"))
                scroll, inner = browser.execute_script(
                    "return [document.documentElement.scrollWidth, window.innerWidth]"
                )
                assert scroll <= inner, (path, scroll, inner)
    finally:
        browser.set_window_size(1366, 900)


def test_the_chart_after_a_policy_change(tmp_path, browser, shots):
    """Grown without a budget, then put under one: the budget is drawn from the change on, and the change marked."""
    url = f"sqlite:///{tmp_path / 'changed.db'}"
    with PruneStore(url) as store:
        turns = list(generate("agent", 120).by_turn())
        for messages in turns[:80]:
            store.append("agent", messages)
        store.rebuild(policy=Policy(budget=6000, clear_at_least=3000))
        for messages in turns[80:]:
            store.append("agent", messages)
        changed_at = next(b.turn for a, b in pairwise(store.history("agent")) if b.generation != a.generation)
    with serving(url) as (base, _):
        browser.get(f"{base}/chart?session=agent")
        browser.save_screenshot(str(shots / "chart-policy-change.png"))
        budgets = browser.find_elements(By.CSS_SELECTOR, "#tokens-chart line.budget")
        changes = browser.find_elements(By.CSS_SELECTOR, "#tokens-chart line.policy-change")
        assert [b.get_attribute("data-budget") for b in budgets] == ["6000"]
        assert [int(c.get_attribute("data-turn")) for c in changes] == [changed_at]
        start = float(budgets[0].get_attribute("x1"))
        assert start == float(changes[0].get_attribute("x1"))  # the budget begins where it was set
        events = browser.find_elements(By.CSS_SELECTOR, "#tokens-chart line.event")
        assert all(int(e.get_attribute("data-turn")) > changed_at for e in events)


def test_navigation_filters_search_go_to_and_sort(demo, browser, shots):
    """Through the forms and links, as a person clicks: only pruned, a role and a text, a message by id, a sort."""
    store, base = demo
    name = "agent-200"
    every = store.messages(name)
    browser.get(session_url(base, name))
    Select(browser.find_element(By.ID, "only")).select_by_value("pruned")
    Select(browser.find_element(By.ID, "role")).select_by_value("tool_output")
    with navigation(browser):
        browser.find_element(By.ID, "filter").click()
    browser.save_screenshot(str(shots / "filtered.png"))
    shown = [r["seq"] for r in browser.execute_script(ROWS)]
    expected = [m.seq for m in every if m.role == "tool_output" and m.verdict not in ("kept", "restored", "pending")]
    assert shown == expected[: len(shown)] and shown
    word = every[-1].content.split()[0]
    browser.get(session_url(base, name))
    browser.find_element(By.ID, "q").send_keys(word)
    with navigation(browser):
        browser.find_element(By.ID, "q").send_keys(Keys.ENTER)
    found = [r["seq"] for r in browser.execute_script(ROWS)]
    assert found == [m.seq for m in every if word in m.content][:WINDOW] and found
    target = every[len(every) // 2]
    browser.get(session_url(base, name))
    browser.find_element(By.ID, "goto").send_keys(target.id)
    with navigation(browser):
        browser.find_element(By.ID, "goto").send_keys(Keys.ENTER)
    assert browser.current_url.endswith(f"#m{target.seq}")
    assert browser.find_element(By.ID, f"m{target.seq}").is_displayed()
    browser.get(base + "/")
    follow(browser, browser.find_element(By.ID, "sort-tokens"))
    tokens = [
        int(t.text.replace(",", ""))
        for t in browser.find_elements(By.CSS_SELECTOR, "#sessions tr.session td:nth-child(3)")
    ]
    assert tokens == sorted(tokens, reverse=True) and len(tokens) == len(store.sessions())
    assert browser.find_element(By.ID, "count").text.startswith(str(len(store.sessions())))


def test_an_operator_follows_an_erasure_from_the_session_to_its_receipt_and_back(tmp_path, browser, shots):
    url = f"sqlite:///{tmp_path / 'erased.db'}"
    with PruneStore(url) as store:
        store.append(
            "support",
            [
                Message("fmt-1", "tool_output", "format: CSV DEFINE:fmt", 1, tool_key="prefs"),
                Message("addr", "user", "My address is 1 Secret Lane", 2),
                Message("fmt-2", "tool_output", "format: TSV DEFINE:fmt", 3, tool_key="prefs"),
                Message("ask", "user", "Export it REF:fmt", 4),
            ],
        )
        receipt = store.erase("support", ["addr", "fmt-2"])
        assert receipt.changed == {"fmt-1": ("superseded", "kept")}
    with serving(url) as (base, _):
        browser.get(session_url(base, "support"))
        follow(browser, browser.find_element(By.ID, "erasures"))
        browser.save_screenshot(str(shots / "erasures.png"))
        section = browser.find_element(By.ID, "e1")
        assert "Secret Lane" not in browser.page_source
        assert [a.text for a in browser.find_elements(By.CSS_SELECTOR, "#erased-1 a")] == list(receipt.erased)
        assert [a.text for a in browser.find_elements(By.CSS_SELECTOR, "#added-1 a")] == ["fmt-1"]
        assert "fmt-1: superseded → kept" in section.text
        follow(browser, browser.find_element(By.CSS_SELECTOR, "#erased-1 a"))
        assert browser.find_element(By.ID, "message-id").text == "addr"
        follow(browser, browser.find_element(By.CSS_SELECTOR, "#erased-by a"))
        assert browser.current_url.endswith("/erasures?session=support#e1")


def test_an_operator_unfolds_a_summary_and_follows_its_span_and_its_erasure(tmp_path, browser, shots):
    url = f"sqlite:///{tmp_path / 'summaries.db'}"
    with PruneStore(url, policy=Policy(budget=45, clear_at_least=10)) as store:
        store.append("chat", Message("s", "system", "Be brief.", turn=0))
        for turn in range(1, 5):
            store.append(
                "chat",
                [
                    Message(f"q{turn}", "user", f"What was the weather on day {turn}?", turn=turn),
                    Message(f"a{turn}", "assistant", f"Day {turn} was mild and dry.", turn=turn),
                ],
            )
        (written,) = store.summarize("chat", lambda span: "Earlier days were mild.").written
        (summary,) = store.messages("chat", [written])
        live = [m.id for m in store.live("chat")]
        assert live[1] == written
    with serving(url) as (base, _):
        browser.get(session_url(base, "chat"))
        rows = read_session(browser)
        assert [r["id"] for r in rows] == [m.id for m in store.messages("chat")]
        row = browser.find_element(By.ID, f"m{summary.seq}")
        assert row.get_attribute("data-verdict") == "kept"
        assert "a summary of 4 messages, some of it evicted" in row.text
        folded = row.find_element(By.CSS_SELECTOR, "details.span")
        assert f"stands for 4 messages, where #{summary.place} began" in folded.text
        assert not folded.find_element(By.CSS_SELECTOR, "a").is_displayed()
        folded.find_element(By.TAG_NAME, "summary").click()
        browser.save_screenshot(str(shots / "summary.png"))
        links = folded.find_elements(By.CSS_SELECTOR, "a")
        assert [a.text for a in links] == list(summary.summarizes)
        follow(browser, links[0])
        assert browser.find_element(By.ID, "message-id").text == "q1"

        browser.get(f"{base}/message?{urlencode({'session': 'chat', 'id': written})}")
        assert "stands for 4 messages" in browser.find_element(By.ID, "stands-for").text
        with PruneStore(url) as store:
            receipt = store.erase("chat", "q2")
        assert receipt.invalidated == (written,)
        browser.get(f"{base}/erasures?{urlencode({'session': 'chat'})}")
        assert [a.text for a in browser.find_elements(By.CSS_SELECTOR, "#invalidated-1 a")] == [written]
        assert "Earlier days were mild." not in browser.page_source
