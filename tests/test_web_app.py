"""The web view's application on every backend, in process: pages, errors, headers, and the reads behind them.

The browser tests (test_web.py) look at the pages as a person would on
SQLite; these check that each page answers the same on PostgreSQL and on
partitioned tables, and that nothing but reading is possible.
"""

from __future__ import annotations

import dataclasses
import html
import json
import re
import subprocess
import sys
import threading
from itertools import pairwise
from pathlib import Path

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient
from webpages import serving

from prunestore import InvalidArgumentError, Message, PruneStore
from prunestore.cli import main
from prunestore.cli.serve import is_loopback
from prunestore.results import HistoryPoint
from prunestore.showcase.workloads import generate
from prunestore.web import create_app
from prunestore.web.app import WINDOW
from prunestore.web.chart import MOST_POINTS, per_turn, thinned, tokens_chart

NAME = "team/a?b#c%d"


@pytest.fixture
def filled(store):
    for messages in generate("agent", 60).by_turn():
        store.append(NAME, messages)
    store.append(NAME, Message("nul", "user", "a\x00b <script>x</script>", 61))
    return store


def test_every_page_answers_and_matches_the_store(filled):
    client = TestClient(create_app(filled), base_url="http://127.0.0.1:8000")
    stored = filled.messages(NAME)
    page = client.get("/", params={"prefix": "team/"})
    assert page.status_code == 200 and "team/a?b#c%d" in page.text
    windows = [client.get("/session", params={"name": NAME, "after": after}) for after in range(0, len(stored), WINDOW)]
    rows = [row for w in windows for row in re.findall(r'data-seq="(\d+)" data-verdict="(\w+)"', w.text)]
    assert [(int(seq), verdict) for seq, verdict in rows] == [(m.seq, m.verdict) for m in stored]
    last = stored[-1]
    message = client.get("/message", params={"session": NAME, "id": last.id})
    assert message.status_code == 200 and "a\u2400b &lt;script&gt;x&lt;/script&gt;" in message.text
    assert "<script>" not in message.text
    content = client.get("/content", params={"session": NAME, "id": last.id})
    assert content.text == "a\x00b <script>x</script>" and content.headers["content-type"].startswith("text/plain")
    chart = client.get("/chart", params={"session": NAME})
    assert chart.text.count('class="point"') == len({m.turn for m in stored})
    for response in (page, *windows, message, content, chart):
        assert "script-src" not in response.headers["content-security-policy"]  # default-src 'none': no script
        assert response.headers["x-content-type-options"] == "nosniff"


def test_the_reads_behind_the_pages(filled):
    stored = filled.messages(NAME)
    shown = filled.window(NAME, after=10, limit=25)
    assert shown.session == filled.summary(NAME) and shown.after == 10
    assert [e.message for e in shown.entries] == stored[10:35]
    for entry in shown.entries:
        why = filled.explain(NAME, entry.message.id)
        assert entry.explanation == dataclasses.replace(why, needed_by=())
        assert filled.entry(NAME, entry.message.id) == dataclasses.replace(entry, explanation=why)
    assert filled.window(NAME, after=len(stored)).entries == ()
    assert [s.name for s in filled.summaries(limit=5)] == filled.sessions(limit=5)
    for field, kwargs in (("after", {"after": -1}), ("limit", {"limit": 0}), ("after", {"after": "3"})):
        with pytest.raises(InvalidArgumentError, match=f"^{field}="):
            filled.window(NAME, **kwargs)


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/session?name=nobody", 404),
        ("/message?session=nobody&id=x", 404),
        (f"/message?session={NAME.replace('?', '%3F').replace('#', '%23').replace('%d', '%25d')}&id=nothing", 404),
        ("/chart?session=nobody", 404),
        ("/session", 400),
        ("/session?name=x&after=-1", 400),
        ("/session?name=x&after=%C2%B2", 400),
        ("/session?name=x&after=9223372036854775807", 400),
        ("/session?name=x&after=99999999999999999999", 400),
        ("/session?name=x&after=" + "9" * 5000, 400),
        ("/session?name=" + "n" * 600, 400),
        ("/session?name=a%00b", 400),
        ("/chart?session=a%00b", 400),
        ("/?prefix=%00", 400),
        ("/?after=a%00", 400),
        (f"/message?session={NAME.replace('?', '%3F').replace('#', '%23').replace('%d', '%25d')}&id={'i' * 5000}", 400),
    ],
)
def test_errors_are_pages_with_a_status(filled, path, status):
    response = TestClient(create_app(filled), base_url="http://127.0.0.1:8000").get(path)
    assert response.status_code == status
    assert 'id="error"' in response.text


@pytest.mark.parametrize(
    ("base", "allowed", "status"),
    [
        ("http://127.0.0.1:8000", None, 200),
        ("http://localhost:8000", None, 200),
        ("http://[::1]:8000", None, 200),
        ("http://LOCALHOST", None, 200),
        ("http://attacker.example:8000", None, 400),  # a rebinding name that resolves to this machine
        ("http://testserver", None, 400),
        ("http://view.example:8000", ["view.example"], 200),
        ("http://127.0.0.1:8000", ["view.example"], 400),
    ],
)
def test_only_allowed_host_names_are_answered(filled, base, allowed, status):
    app = create_app(filled) if allowed is None else create_app(filled, allowed_hosts=allowed)
    response = TestClient(app, base_url=base).get("/")
    assert response.status_code == status
    assert response.headers["Content-Security-Policy"].startswith("default-src 'none'")
    if status == 400:
        assert NAME not in response.text


def test_nothing_can_be_written(filled):
    client = TestClient(create_app(filled), base_url="http://127.0.0.1:8000")
    before = filled.messages(NAME)
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        for path in ("/", "/session", "/message", "/content", "/chart"):
            assert client.request(method, path, params={"name": NAME}).status_code == 405
    assert filled.messages(NAME) == before


def test_serve_warns_when_it_listens_beyond_this_machine(tmp_path):
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.4") and not is_loopback("example.org")
    url = f"sqlite:///{tmp_path / 'store.db'}"
    PruneStore(url).close()
    with serving(url) as (_, process):
        pass
    assert "WARNING" not in process.stderr.read()
    with serving(url, "--host", "0.0.0.0", "--json") as (base, process):
        port = base.rsplit(":", 1)[1]
    said = process.stderr.read()
    assert "WARNING: listening on 0.0.0.0" in said and "no login" in said
    assert json.loads(process.stdout.read()) == {
        "store": url,
        "address": f"http://0.0.0.0:{port}/",
        "read_only": True,
    }


def test_serve_without_the_web_extra_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "uvicorn", None)  # as if it were not installed
    result = CliRunner().invoke(main, ["--db", f"sqlite:///{tmp_path / 's.db'}", "serve"])
    assert result.exit_code == 2 and result.output.startswith("Error:") and result.output.count("\n") == 1
    assert "pip install '.[web]'" in result.output


def test_serve_on_a_port_in_use_says_so_in_one_line_before_anything_else(tmp_path):
    import socket

    PruneStore(f"sqlite:///{tmp_path / 's.db'}").close()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        command = [
            sys.executable,
            "-m",
            "prunestore",
            "--db",
            f"sqlite:///{tmp_path / 's.db'}",
            "serve",
            "--port",
            port,
        ]
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith(f"Error: port={port}: cannot listen on 127.0.0.1:{port}"), done.stderr
    assert done.stderr.count("\n") == 1


def test_serve_has_help():
    result = subprocess.run([sys.executable, "-m", "prunestore.cli", "serve", "--help"], capture_output=True, text=True)
    assert result.returncode == 0 and "--host" in result.stdout and "read-only" in result.stdout


def test_the_chart_takes_the_last_point_of_each_turn_and_thins_only_what_one_pixel_hides():
    points = [HistoryPoint(seq, seq // 3, seq * 10, seq * 10 % 997, seq // 50) for seq in range(1, 30_000)]
    turns = per_turn(points)
    assert [p.turn for p in turns] == sorted({p.turn for p in points})
    assert all(p.seq == max(q.seq for q in points if q.turn == p.turn) for p in turns[:50])
    assert thinned(turns[:MOST_POINTS], 100) == turns[:MOST_POINTS]  # few enough: every turn
    kept = thinned(turns, 100)
    assert len(kept) <= 4 * 101 and kept[0] == turns[0] and kept[-1] == turns[-1]
    assert [p.seq for p in kept] == sorted({p.seq for p in kept})
    assert max(p.live_tokens for p in kept) == max(p.live_tokens for p in turns)
    assert min(p.live_tokens for p in kept) == min(p.live_tokens for p in turns)
    chart = tokens_chart(points, budget=5000)
    assert chart.turn_count == len(turns) and len(chart.after.split()) == len(chart.turns) < len(turns)

    dense = [HistoryPoint(seq, seq // 3, seq * 10, 100, seq // 4) for seq in range(1, 30_000)]
    chart, turns = tokens_chart(dense, budget=5000), per_turn(dense)
    added = {b.turn: b.events - a.events for a, b in pairwise(turns) if b.events > a.events}
    # One mark per pixel column, standing for the event turns that fall on it, in order and each once.
    assert [int(x) for x, *_ in chart.events] == sorted({int(x) for x, *_ in chart.events})
    assert len(chart.events) <= chart.plot[2] - chart.plot[0] + 1 < len(added)
    covered = [turn for _, first, last, _ in chart.events for turn in added if first <= turn <= last]
    assert covered == list(added)
    assert [n for *_, n in chart.events] == [
        sum(n for turn, n in added.items() if first <= turn <= last) for _, first, last, _ in chart.events
    ]
    few = tokens_chart(points[:300], budget=5000)  # a turn every few pixels: a mark per event turn
    assert [(first, last) for _, first, last, _ in few.events] == [
        (b.turn, b.turn) for a, b in pairwise(per_turn(points[:300])) if b.events > a.events
    ]


def test_a_page_is_one_snapshot_while_another_store_appends(filled, store_url):
    """Pages read while a writer (another store object, in another thread) appends stay consistent."""
    client = TestClient(create_app(filled), base_url="http://127.0.0.1:8000")
    writer = PruneStore(store_url)
    start = filled.summary(NAME).current_turn + 1

    def append() -> None:
        for turn in range(start, start + 150):
            writer.append(NAME, [Message(f"w{turn}", "user", f"more {turn}", turn)])

    thread = threading.Thread(target=append)
    thread.start()
    try:
        pages = 0
        while thread.is_alive() or pages < 3:
            messages = filled.summary(NAME).messages
            after = (messages - 1) // WINDOW * WINDOW
            page = client.get("/session", params={"name": NAME, "after": after}).text
            total = int(re.search(r"messages [\d,]+–[\d,]+ of ([\d,]+)", page).group(1).replace(",", ""))
            seqs = [int(seq) for seq in re.findall(r'data-seq="(\d+)"', page)]
            assert seqs == list(range(after + 1, min(after + WINDOW, total) + 1))  # the rows of the count shown
            pages += 1
    finally:
        thread.join()
        writer.close()
    assert filled.verify().ok


def test_an_erased_message_shows_as_a_tombstone_with_its_cause(store):
    store.append("e", [Message("a", "user", "DEFINE fmt csv SECRETWORD", 0), Message("b", "user", "REF fmt", 1)])
    store.erase("e", "a")
    client = TestClient(create_app(store), base_url="http://127.0.0.1:8000")
    page = client.get("/session", params={"name": "e"})
    assert re.findall(r'data-seq="(\d+)" data-verdict="(\w+)"', page.text) == [("1", "erased"), ("2", "kept")]
    message = client.get("/message", params={"session": "e", "id": "a"})
    assert message.status_code == 200 and "erased: what it said was removed for good" in message.text
    assert all(
        "SECRETWORD" not in r.text for r in (page, message, client.get("/content", params={"session": "e", "id": "a"}))
    )


def test_the_erasures_page_lists_each_receipt_with_links_and_the_tombstone_links_back(store):
    tools = [Message(f"t{i}", "tool_output", f"SECRETWORD listing {i}", i, tool_key="ls") for i in range(3)]
    store.append("e", [*tools, Message("<u>", "user", "hello", 3)])
    client = TestClient(create_app(store), base_url="http://127.0.0.1:8000")
    assert 'id="erasures"' not in client.get("/session", params={"name": "e"}).text
    assert 'id="none"' in client.get("/erasures", params={"session": "e"}).text
    first, second = store.erase("e", ["t2", "<u>"]), store.erase("e", "t1")
    page = client.get("/session", params={"name": "e"})
    assert re.search(r'<a id="erasures" href="/erasures\?session=e">Erasures \(2\)</a>', page.text)
    listing = client.get("/erasures", params={"session": "e"})
    assert listing.status_code == 200 and "SECRETWORD" not in listing.text
    sections = re.findall(r'<section class="receipt" id="e(\d)">(.*?)</section>', listing.text, re.S)
    assert [n for n, _ in sections] == ["1", "2"]
    linked = [re.findall(r'href="/message\?session=e&amp;id=([^"]+)"', body) for _, body in sections]
    assert linked == [["t2", "%3Cu%3E", "t1", "t2", "%3Cu%3E", "t1"], ["t1", "t0", "t1", "t0"]]
    assert first.at is not None and first.at.strftime("%Y-%m-%d %H:%M:%S UTC") in sections[0][1]
    assert second.changed == {"t0": ("superseded", "kept")}
    assert 'superseded</span> → <span class="verdict v-kept">kept' in sections[0][1]
    tombstone = client.get("/message", params={"session": "e", "id": "t1"})
    assert re.search(r'<dd id="erased-by"><a href="/erasures\?session=e#e2">erasure 2</a>', tombstone.text)
    assert 'id="erased-by"' not in client.get("/message", params={"session": "e", "id": "t0"}).text
    assert client.get("/erasures", params={"session": "nobody"}).status_code == 404


def test_an_empty_session_has_its_pages(store):
    store.append("emptied", Message("only", "user", "hello", 0))
    store.pop("emptied")
    client = TestClient(create_app(store), base_url="http://127.0.0.1:8000")
    chart = client.get("/chart", params={"session": "emptied"})
    assert chart.status_code == 200 and "holds no messages" in chart.text and "<polyline" not in chart.text
    page = client.get("/session", params={"name": "emptied"})
    assert page.status_code == 200 and "No messages here." in page.text and 'id="next"' not in page.text


def test_a_window_reads_the_first_characters_of_each_text(store, recorded):
    long = "é" * 5_000 + "\x00" + "z" * 50_000
    store.append("big", [Message("a", "user", long, 1), Message("b", "user", "short", 1)])
    window = store.window("big", text_chars=2_000)
    assert [e.message.content for e in window.entries] == [long[:2_000], "short"]
    assert [e.content_chars for e in window.entries] == [len(long), 5]
    clipped = [text for text in recorded if "substr(content" in text]
    assert clipped and not [text for text in recorded if "FROM prunestore_messages" in text and " content," in text]
    assert store.window("big").entries[0].message.content == long  # without text_chars: the whole text


def test_paging_edges(store):
    from prunestore.web.app import PAGE_SIZE, ROW_CHARS

    for n in range(PAGE_SIZE):
        store.append(f"s{n:03}", Message("a", "user", "x", 1))
    client = TestClient(create_app(store), base_url="http://127.0.0.1:8000")
    assert 'id="next"' not in client.get("/").text  # exactly one full page: no empty next page
    store.append("zz", Message("a", "user", "x", 1))
    first = client.get("/").text
    assert 'id="next"' in first
    following = client.get("/", params={"after": f"s{PAGE_SIZE - 1:03}"}).text
    assert "zz" in following and 'id="next"' not in following
    store.append("long", [Message("t1", "tool_output", "y" * (ROW_CHARS + 500), 1, tool_key="k")])
    store.append("long", [Message("t2", "tool_output", "z", 2, tool_key="k")])  # t1 is pruned, and folded
    page = client.get("/session", params={"session": "long"}).text
    folded = page[page.index('id="m1"') : page.index('id="m2"')]
    assert folded.index("500 more characters") > folded.index("<details")  # inside the fold
    beyond = client.get("/session", params={"session": "long", "after": 99999}).text
    assert "no messages after #99999; the session holds 2" in beyond and "0–99999" not in beyond


def test_a_chart_of_one_turn_shows_both_series(store):
    store.append("one", [Message("a", "user", "hello there", 1), Message("b", "user", "hello there", 1)])
    page = TestClient(create_app(store), base_url="http://127.0.0.1:8000").get("/chart", params={"session": "one"})
    assert page.text.count('class="stored-point"') == 1 and page.text.count('class="point"') == 1


@pytest.mark.parametrize("fixture", ["openai_agent.json", "anthropic_agent.json"])
def test_the_prompt_page_is_what_render_gives(store, fixture):
    """Message by message, the page shows render()'s prompt, and lists each call it leaves out with the cause."""
    from prunestore import from_anthropic, from_openai
    from prunestore.web.prompt import prompt_page

    data = json.loads((Path(__file__).parent / "fixtures" / fixture).read_text())
    if fixture.startswith("openai"):
        messages, fmt = from_openai(data), "openai"
    else:
        messages, fmt = from_anthropic(data["messages"], data.get("system")), "anthropic"
    store.append("agent", messages)
    client = TestClient(create_app(store), base_url="http://127.0.0.1:8000")
    for placeholders in (False, True):
        params = {"session": "agent", **({"placeholders": "1"} if placeholders else {})}
        page = client.get("/prompt", params=params).text  # the session's own format by default
        rendered = store.render("agent", fmt, dropped="placeholder" if placeholders else "omit")
        assert page.count('class="msg wire"') == len(rendered.messages) + (fmt == "anthropic" and bool(rendered.system))
        laid_out = prompt_page(store.messages("agent"), fmt, placeholders)
        assert laid_out.report == rendered.report
        assert (page.count('class="left-out"'), page.count('data-kind="placeholder"')) == (
            rendered.report.calls_removed,
            rendered.report.placeholders,
        )
        assert len(laid_out.left_out) == rendered.report.calls_removed
        for left in laid_out.left_out:
            assert f'data-call="{left.call_id}"' in page
    assert rendered.report.calls_removed == 0 and rendered.report.placeholders > 0  # the fixtures prune results
    other = "anthropic" if fmt == "openai" else "openai"
    assert client.get("/prompt", params={"session": "agent", "format": other}).status_code == 200
    assert client.get("/prompt", params={"session": "agent", "format": "xml"}).status_code == 400
    text = client.get("/prompt", params={"session": "agent", "format": "text"}).text
    shown_text = re.search(r'id="prompt-text" dir="auto">([^<]*)</div>', text)
    assert shown_text is not None and html.unescape(shown_text.group(1)) == store.render("agent", "text").text


def test_runs_of_pruned_messages_fold_into_one_line(open_store):
    from prunestore import Policy
    from prunestore.web.app import FOLDED_RUN

    store = open_store(Policy(budget=400, clear_at_least=200))
    for turn in range(1, 40):
        store.append("b", Message(f"t{turn}", "tool_output", "rows " * 30, turn, tool_key=f"q{turn}"))
    page = TestClient(create_app(store), base_url="http://127.0.0.1:8000").get("/session", params={"session": "b"}).text
    runs = re.findall(
        r'<details class="run"><summary class="muted">(\d+) pruned messages, #(\d+)–#(\d+): ([^<]+)</summary>', page
    )
    assert runs and all(int(n) >= FOLDED_RUN for n, _, _, _ in runs)
    n, first, last, counts = runs[0]
    assert int(last) - int(first) + 1 == int(n) and counts == f"{n} evicted"
    assert page.count('class="msg ') == 39  # every message is still on the page, inside its run
    everything = TestClient(create_app(store), base_url="http://127.0.0.1:8000").get(
        "/session", params={"session": "b", "show": "all"}
    )
    assert '<details class="run" open>' in everything.text


def test_windows_filtered_by_verdict_role_text_and_turn(store):
    from prunestore import InvalidArgumentError

    for turn in range(1, 61):
        store.append(
            "f",
            [
                Message(f"u{turn}", "user", f"question {turn} about {'apples' if turn % 3 else 'pears'}", turn),
                Message(f"t{turn}", "tool_output", f"listing {turn}", turn, tool_key="ls"),
            ],
        )
    every = store.messages("f")
    pruned = store.window("f", limit=500, verdicts=["superseded", "expired", "duplicate", "evicted"])
    assert [e.message.id for e in pruned.entries] == [m.id for m in every if m.verdict == "superseded"]
    users = store.window("f", after=10, limit=7, roles=["user"], contains="pears")
    expected = [m.id for m in every if m.seq > 10 and m.role == "user" and "pears" in m.content][:7]
    assert [e.message.id for e in users.entries] == expected
    assert store.window("f", limit=1, from_turn=40).entries[0].message.id == "u40"
    for bad in ({"verdicts": "kept"}, {"roles": ["robot"]}, {"contains": ""}, {"from_turn": -1}, {"verdicts": []}):
        with pytest.raises(InvalidArgumentError):
            store.window("f", **bad)
    client = TestClient(create_app(store), base_url="http://127.0.0.1:8000")
    page = client.get("/session", params={"session": "f", "only": "pruned"}).text
    assert re.findall(r'data-verdict="(\w+)"', page) == ["superseded"] * 59
    page = client.get("/session", params={"session": "f", "only": "prompt", "role": "user", "q": "pears"}).text
    assert re.findall(r'id="m(\d+)"', page) == [str(m.seq) for m in every if m.role == "user" and "pears" in m.content]
    full = client.get("/session", params={"session": "f", "only": "prompt"}).text  # 61 in the prompt: one page
    assert 'id="next"' not in full and "61 matching messages after #0" in full
    found = client.get("/session", params={"session": "f", "goto": "t55"}, follow_redirects=False)
    seq = next(m.seq for m in every if m.id == "t55")
    assert found.status_code == 303 and found.headers["location"].endswith(f"after=100#m{seq}")
    by_turn = client.get("/session", params={"session": "f", "goto": "12"}, follow_redirects=False)
    assert by_turn.headers["location"].endswith("#m23")  # u12, the first message of turn 12
    assert (
        client.get("/session", params={"session": "f", "goto": "#7"}, follow_redirects=False)
        .headers["location"]
        .endswith("#m7")
    )
    assert client.get("/session", params={"session": "f", "goto": "nothing-like-it"}).status_code == 404
    assert client.get("/session", params={"session": "f", "only": "everything"}).status_code == 400


def test_sessions_sorted_by_size_page_by_page_with_a_total(store):
    from prunestore import InvalidArgumentError
    from prunestore.web.app import PAGE_SIZE

    for n in range(PAGE_SIZE + 7):
        store.append(f"s{n:03}", [Message(f"m{i}", "user", "word " * (n % 9 + 1), 1) for i in range(n % 4 + 1)])
    by_tokens = store.summaries(order="tokens", limit=10)
    assert [s.tokens for s in by_tokens] == sorted((s.tokens for s in by_tokens), reverse=True)
    every = []
    last = None
    while True:  # pages in token order, each after the last row of the one before
        page = store.summaries(order="tokens", limit=10, after=last)
        every += page
        if len(page) < 10:
            break
        last = page[-1]
    assert [s.name for s in every] == [s.name for s in sorted(store.summaries(), key=lambda s: (-s.tokens, s.name))]
    assert store.session_count() == PAGE_SIZE + 7 and store.session_count("s00") == 10
    with pytest.raises(InvalidArgumentError):
        store.summaries(order="size")
    with pytest.raises(InvalidArgumentError):
        store.summaries(order="tokens", after="s001")
    client = TestClient(create_app(store), base_url="http://127.0.0.1:8000")
    first = client.get("/", params={"sort": "tokens"}).text
    assert f'id="count">{PAGE_SIZE + 7}' in first and 'id="sorted-tokens"' in first
    names = re.findall(r'<td class="name"><a href="/session\?session=(s\d+)"', first)
    following = re.search(r'id="next" href="([^"]+)"', first).group(1).replace("&amp;", "&")
    second = re.findall(r'<td class="name"><a href="/session\?session=(s\d+)"', client.get(following).text)
    assert names + second == [s.name for s in every]
    assert client.get("/", params={"sort": "colour"}).status_code == 400


def test_the_session_page_marks_the_calls_the_prompt_drops(store):
    from prunestore import from_openai
    from prunestore.web.prompt import prompt_page

    transcript = json.loads((Path(__file__).parent / "fixtures" / "openai_agent.json").read_text())
    abandoned = {"role": "assistant", "content": None, "tool_calls": [_call("gone", "ls")]}
    store.append("agent", from_openai([*transcript, abandoned, {"role": "user", "content": "never mind"}]))
    left_out = prompt_page(store.messages("agent"), "openai", False).left_out
    client = TestClient(create_app(store), base_url="http://127.0.0.1:8000")
    dropped, kept = set(), set()
    after = 0
    while True:  # every window, as a person pages through them
        page = client.get("/session", params={"session": "agent", "after": after}).text
        dropped |= set(re.findall(r'<div class="call dropped" data-call="([^"]+)"', page))
        kept |= set(re.findall(r'<div class="call" data-call="([^"]+)"', page))
        if 'id="next"' not in page:
            break
        after += 100
    assert dropped == {c.call_id for c in left_out} and "gone" in dropped  # the abandoned call, in the last window
    assert not dropped & kept and kept


def _call(call_id: str, name: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}


def test_an_evicted_message_page_names_its_removal_event(open_store):
    from prunestore import Policy

    store = open_store(Policy(budget=300, clear_at_least=100))
    for turn in range(1, 20):
        store.append("e", Message(f"t{turn}", "tool_output", "row " * 25, turn, tool_key=f"q{turn}"))
    evicted = next(m for m in store.messages("e") if m.verdict == "evicted")
    why = store.explain("e", evicted.id)
    page = TestClient(create_app(store), base_url="http://127.0.0.1:8000").get(
        "/message", params={"session": "e", "id": evicted.id}
    )
    assert f"the removal event of turn {why.evicted_at_turn}" in page.text and 'id="evicted-at"' in page.text
    assert f'href="/message?session=e&amp;id={why.evicted_by}"' in page.text


def test_the_session_page_counts_the_prompt_cache_breaks_by_cause(open_store):
    from prunestore import Policy

    store = open_store(Policy(budget=30, clear_at_least=10))
    for t in range(1, 25):
        batch = [Message(f"f{t}", "user", f"fact {t} DEFINE:k{t}", t), Message(f"c{t}", "assistant", "chat " * 6, t)]
        if t >= 6 and t % 3 == 0:
            batch.append(Message(f"r{t}", "user", f"as said REF:k{t - 6}", t))
        store.append("b", batch)
    stats = store.stats("b")
    assert stats.comebacks
    page = TestClient(create_app(store), base_url="http://127.0.0.1:8000").get("/session", params={"session": "b"}).text
    assert f'<div id="comebacks"><b>{stats.comebacks}</b>comebacks</div>' in page
    assert f"<b>{stats.events}</b>removal events" in page
    assert ('id="late-joins"' in page) == bool(stats.late_joins)


def test_the_chart_of_a_long_session_marks_its_events_once_per_pixel_column(store_url):
    from prunestore import Policy

    with PruneStore(store_url, policy=Policy(budget=60)) as store:
        for turn in range(1, 1201):  # a removal event at almost every turn: more event turns than pixels
            store.append("long", Message(f"t{turn}", "user", f"note {turn} " * 3, turn))
        history = per_turn(store.history("long"))
        page = TestClient(create_app(store), base_url="http://127.0.0.1:8000").get("/chart", params={"session": "long"})
    added = {b.turn: b.events - a.events for a, b in pairwise(history) if b.events > a.events}
    marks = re.findall(
        r'<line class="event"[^>]*? data-turn="(\d+)"(?: data-last-turn="(\d+)")?><title>([^<]*)</title>', page.text
    )
    assert len(added) > 900 and 0 < len(marks) <= 889 and any(last for _, last, _ in marks)
    counted = 0
    for first, last, title in marks:
        within = {turn: n for turn, n in added.items() if int(first) <= turn <= int(last or first)}
        n = sum(within.values())
        span = f"turns {first}–{last}" if last else f"turn {first}"
        assert title == f"{span}: {n} removal event{'s' if n != 1 else ''}" and min(within) == int(first)
        counted += len(within)
    assert counted == len(added)  # every event turn in one mark


def test_a_long_prompt_is_shown_a_window_at_a_time(store):
    """Beyond a window, the prompt page shows 500 of render's messages at a time, and all of them on request."""
    from prunestore.web.app import PROMPT_WINDOW

    store.append("long", [Message(f"m{i}", "user", f"line {i}", i) for i in range(2 * PROMPT_WINDOW + 50)])
    sent = store.render("long", "openai").messages
    client = TestClient(create_app(store), base_url="http://127.0.0.1:8000")

    def window(**params: object) -> tuple[list[int], list[str], str]:
        page = client.get("/prompt", params={"session": "long", **params}).text
        indexes = [int(i) for i in re.findall(r'class="msg wire" data-index="(\d+)"', page)]
        texts = re.findall(r'data-kind="text" dir="auto">([^<]*)</div>', page)
        return indexes, texts, page

    total = len(sent)
    for after in (0, PROMPT_WINDOW, 2 * PROMPT_WINDOW):
        indexes, texts, page = window(**({"after": after} if after else {}))
        assert indexes == list(range(after, min(after + PROMPT_WINDOW, total)))
        assert texts == [m["content"] for m in sent[after : after + PROMPT_WINDOW]]
        assert f"messages {after + 1}–{min(after + PROMPT_WINDOW, total)} of {total:,}" in page
        assert ('id="next"' in page) == (after + PROMPT_WINDOW < total) and ('id="previous"' in page) == (after > 0)
    assert f'id="last" href="/prompt?session=long&amp;format=openai&amp;after={2 * PROMPT_WINDOW}"' in window()[2]
    indexes, texts, page = window(show="all")
    assert indexes == list(range(total)) and texts == [m["content"] for m in sent] and 'id="paged"' in page
    indexes, _, page = window(after=total + 5)
    assert indexes == [] and f"no messages after #{total + 5}; the prompt holds {total:,}" in page
    assert client.get("/prompt", params={"session": "long", "after": "-1"}).status_code == 400
    store.append("short", Message("only", "user", "hi", 0))
    assert 'id="pages"' not in client.get("/prompt", params={"session": "short"}).text  # one window: no paging
    beyond = client.get("/prompt", params={"session": "short", "after": 3}).text  # a link taken by hand
    assert 'class="msg wire"' not in beyond and "no messages after #3; the prompt holds 1" in beyond


def test_a_long_text_prompt_is_shown_a_window_of_messages_at_a_time(store):
    """The text format pages like the others: the window's messages as render writes them, all on request."""
    from prunestore.web.app import PROMPT_WINDOW

    calls = [
        {"role": "user", "content": "start"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "result\n\nwith a blank line"},
    ]  # fmt: skip
    from prunestore import from_openai

    store.append("long", from_openai(calls))
    store.append("long", [Message(f"u{i}", "user", f"line {i}", i + 1) for i in range(PROMPT_WINDOW + 20)])
    whole = store.render("long", "text").text
    client = TestClient(create_app(store), base_url="http://127.0.0.1:8000")

    def text(**params: object) -> tuple[str, str]:
        page = client.get("/prompt", params={"session": "long", "format": "text", **params}).text
        found = re.search(r'id="prompt-text" dir="auto">([^<]*)</div>', page)
        assert found is not None
        return html.unescape(found.group(1)), page

    first, page = text()
    total = PROMPT_WINDOW + 22  # the call and its result are one message sent
    assert f"messages 1–{PROMPT_WINDOW} of {total:,}" in page and 'id="next"' in page
    rest, page = text(after=PROMPT_WINDOW)
    assert f"messages {PROMPT_WINDOW + 1}–{total} of {total:,}" in page and 'id="previous"' in page
    assert first + "\n\n" + rest == whole  # the windows are render's text, cut between messages
    assert first.startswith("user: start\n\nassistant called f({})\n\ntool result: result\n\nwith a blank line")
    assert text(show="all")[0] == whole
