"""The dashboard in a real headless Chromium (Playwright), served by the real ``taskq dashboard``
command against a real database, with a real worker where a task must run.

Playwright drives Debian's Chromium (/usr/bin/chromium): it cannot download a browser of its
own here. Without Chromium or the playwright package these tests skip locally, and fail under
CI (which installs both: .ci/run)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_dashboard import XSS, dead, expected_backlog, insert, seed_overview
from tests.support import ROOT, WorkerProcess, execute, rows, taskq_command, wait_until_sync

# Subprocesses, a browser, a wheel build: seconds each; not in the everyday loop.
pytestmark = pytest.mark.slow

try:
    from playwright.sync_api import Browser, Page, expect, sync_playwright
except ImportError:  # pragma: no cover - the dev extra installs it
    sync_playwright = None

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
LAUNCH_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = ROOT / "tests" / "artifacts"
TOKEN = "browser-token-0123456789abcdef-xyz"


def _missing() -> str | None:
    if sync_playwright is None:
        return "the playwright package is not installed (pip install -e '.[dev]')"
    if not os.access(CHROMIUM, os.X_OK):
        return f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    missing = _missing()
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"browser tests cannot run under CI: {missing}")
        pytest.skip(missing)
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        yield launched
        launched.close()


class Tab:
    """A page plus what it must not do: open dialogs (an alert() would mean injected script
    ran) or log errors (a Content-Security-Policy violation is one)."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.dialogs: list[str] = []
        self.errors: list[str] = []
        page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(str(e)))


@pytest.fixture
def tab(browser: Browser) -> Iterator[Tab]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    t = Tab(context.new_page())
    yield t
    context.close()
    assert t.dialogs == [], t.dialogs
    assert t.errors == [], t.errors


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serve(dsn: str, log: Path, *args: str, token: str | None = None) -> Iterator[str]:
    """``taskq dashboard`` as an operator starts it; yields its base URL."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "TASKQ_DASHBOARD_TOKEN"}
    if token:
        env["TASKQ_DASHBOARD_TOKEN"] = token
    with log.open("w") as out:
        proc = subprocess.Popen(
            [*taskq_command(), "dashboard", "--port", str(port), "--dsn", dsn, *args],
            env=env,
            cwd=ROOT,
            stdout=out,
            stderr=out,
        )
        try:

            def up() -> bool:
                with socket.socket() as s:
                    return proc.poll() is not None or s.connect_ex(("127.0.0.1", port)) == 0

            wait_until_sync(up, timeout=20, what="the dashboard to listen")
            assert proc.poll() is None, log.read_text()
            yield f"http://127.0.0.1:{port}"
        finally:
            proc.terminate()
            proc.wait(10)


@pytest.fixture
def dashboard(dsn: str, tmp_path: Path) -> Iterator[str]:
    with serve(dsn, tmp_path / "dashboard.log") as url:
        yield url


def shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"dashboard-{name}.png"), full_page=True)


def worker(dsn: str, tmp_path: Path) -> WorkerProcess:
    w = WorkerProcess(
        dsn, "tests.apps.dashboard:app", "--queues", "default=2", log_dir=tmp_path / "logs"
    )
    w.wait_ready()
    return w


def test_overview_shows_the_database_numbers_and_refreshes_live(
    dsn: str, dashboard: str, tab: Tab
) -> None:
    seed_overview(dsn)
    expected = expected_backlog(dsn)
    page = tab.page
    page.goto(dashboard + "/")
    for (queue, task_type), numbers in expected.items():
        row = page.locator(f'#t-types tr[data-queue="{queue}"][data-task-type="{task_type}"]')
        for k, n in numbers.items():
            expect(row.locator(f'td[data-k="{k}"]')).to_have_text(str(n))
    expect(page.locator("#level-text")).to_have_text("L2 DEGRADED")
    expect(page.locator('#t-pauses tr[data-name="sms.notify"]')).to_be_visible()
    sms = page.locator('#t-queues tr[data-queue="sms"]')
    expect(sms.locator('td[data-k="use"]')).to_have_text("3/2")

    # New work appears without a reload: the page polls /api/overview every 2 s.
    execute(
        dsn,
        "INSERT INTO taskq.tasks (queue, task_type) SELECT 'mail', 'mail.send' "
        "FROM generate_series(1, 3)",
    )
    runnable = expected[("mail", "mail.send")]["runnable"] + 3
    cell = page.locator('#t-types tr[data-task-type="mail.send"] td[data-k="runnable"]')
    expect(cell).to_have_text(str(runnable), timeout=8000)
    shot(page, "overview")


def test_requeue_a_dead_letter_through_the_ui_and_it_runs(
    dsn: str, dashboard: str, tab: Tab, tmp_path: Path
) -> None:
    target = dead(dsn, "dash.ok", "ProviderDown: 503 from the SMS gateway", 2)
    other = dead(dsn, "dash.ok", "ValueError: bad number", 1)
    worker(dsn, tmp_path)
    page = tab.page
    page.goto(dashboard + "/dlq")
    expect(page.locator("#dlq-table tbody tr[data-task-id]")).to_have_count(2)

    page.fill('input[name="error"]', "providerdown")
    page.click('#dlq-filter button[type="submit"]')
    expect(page.locator("#dlq-table tbody tr[data-task-id]")).to_have_count(1)
    page.click(f'tr[data-task-id="{target}"] a[data-action="requeue"]')
    expect(page.locator("h1")).to_have_text("Requeue 1 dead letter(s)")
    page.fill('#confirm-form textarea[name="note"]', "gateway is back")
    page.click('#confirm-form button[type="submit"]')
    expect(page.locator(".flash")).to_have_text("Requeued 1 dead letter(s).")

    wait_until_sync(
        lambda: (
            rows(dsn, f"SELECT status FROM taskq.tasks WHERE id = {target}")[0]["status"]
            == "SUCCESS"
        ),
        timeout=20,
        what="the requeued task to succeed",
    )
    page.reload()
    expect(page.locator(f'tr[data-task-id="{target}"]')).to_have_count(0)
    page.goto(dashboard + "/dlq")
    expect(page.locator("#dlq-table tbody tr[data-task-id]")).to_have_count(1)
    expect(page.locator(f'tr[data-task-id="{other}"]')).to_be_visible()

    page.goto(f"{dashboard}/tasks/{target}")
    expect(page.locator("#task-status")).to_have_text("SUCCESS")
    expect(page.locator("#task-audit")).to_contain_text("gateway is back")
    [audit] = rows(dsn, "SELECT action, task_id, note, detail->>'by' AS by FROM taskq.audit")
    assert (audit["action"], audit["task_id"], audit["note"]) == (
        "dlq_requeue",
        target,
        "gateway is back",
    )
    assert audit["by"].endswith(" via dashboard")
    shot(page, "requeued-task")


def test_the_task_page_follows_progress_live(
    dsn: str, dashboard: str, tab: Tab, tmp_path: Path
) -> None:
    go, finish = tmp_path / "go", tmp_path / "finish"
    payload = json.dumps({"go": str(go), "finish": str(finish)})
    task = insert(dsn, task_type="'dash.steps'", payload=f"'{payload}'")
    worker(dsn, tmp_path)
    wait_until_sync(
        lambda: (
            rows(dsn, f"SELECT status FROM taskq.tasks WHERE id = {task}")[0]["status"]
            == "PROCESSING"
        ),
        what="the task to start",
    )
    page = tab.page
    page.goto(f"{dashboard}/tasks/{task}")
    expect(page.locator("#task-status")).to_have_text("PROCESSING")
    expect(page.locator("#task-percent")).to_have_text("")
    page.evaluate("window.sameDocument = true")  # gone if the page reloads

    go.touch()  # the handler reports 50 %, which only the live stream can bring
    expect(page.locator("#task-percent")).to_have_text("50%", timeout=10000)
    expect(page.locator("#task-message")).to_have_text("halfway")
    assert page.evaluate("window.sameDocument") is True
    shot(page, "live-progress")

    finish.touch()  # the final status ends the stream, and the page shows the final row
    expect(page.locator("#task-status")).to_have_text("SUCCESS", timeout=10000)
    expect(page.locator("#live-note")).to_have_count(0, timeout=10000)


def test_pause_and_resume_a_task_type_through_the_ui(dsn: str, dashboard: str, tab: Tab) -> None:
    insert(dsn, task_type="'dash.ok'")
    page = tab.page
    page.goto(dashboard + "/controls")
    page.select_option('#pause-form select[name="kind"]', "task_type")
    page.fill('#pause-form input[name="name"]', "dash.ok")
    page.fill('#pause-form input[name="note"]', "maintenance window")
    page.click('#pause-form button[type="submit"]')
    expect(page.locator(".flash")).to_contain_text("Paused.")
    [paused] = rows(dsn, "SELECT kind, name, paused_by, note FROM taskq.pauses")
    assert (paused["kind"], paused["name"], paused["note"]) == (
        "task_type",
        "dash.ok",
        "maintenance window",
    )
    assert paused["paused_by"].endswith(" via dashboard")
    row = page.locator('#pauses-table tr[data-name="dash.ok"]')
    expect(row).to_be_visible()
    shot(page, "paused")

    row.locator('button[type="submit"]').click()
    expect(page.locator(".flash")).to_have_text("Resumed.")
    assert rows(dsn, "SELECT * FROM taskq.pauses") == []
    expect(page.locator('#pauses-table tr[data-name="dash.ok"]')).to_have_count(0)


def test_a_script_in_user_data_is_shown_as_text(dsn: str, dashboard: str, tab: Tab) -> None:
    task = insert(
        dsn,
        task_type=f"'{XSS}'",
        status="'DEAD_LETTER'",
        finished_at="now()",
        payload=f"""'{json.dumps({"html": XSS})}'""",
        last_error=f"'Boom: {XSS}'",
    )
    execute(
        dsn,
        f"INSERT INTO taskq.pauses (kind, name, paused_by, note) "
        f"VALUES ('task_type', '{XSS}', '{XSS}', '{XSS}');"
        f"INSERT INTO taskq.audit (actor, action, task_id, note) "
        f"VALUES ('{XSS}', 'dlq_requeue', {task}, '{XSS}')",
    )
    page = tab.page
    page.goto(dashboard + "/")
    stamp = page.locator("#generated-at").inner_text()
    # After a refresh the rows were rebuilt by the script from JSON: still text.
    expect(page.locator("#generated-at")).not_to_have_text(stamp, timeout=8000)
    expect(page.locator('#t-types td[data-k="task_type"]')).to_have_text(XSS)
    expect(page.locator('#t-pauses td[data-k="note"]')).to_have_text(XSS)

    page.goto(f"{dashboard}/tasks/{task}")
    expect(page.locator("#task-payload")).to_contain_text(f'"html": "{XSS}"')
    expect(page.locator("#task-error")).to_have_text(f"Boom: {XSS}")
    expect(page.locator("h1 .type")).to_have_text(XSS)
    shot(page, "escaped-task")
    # textContent holds the tags only if they are text: a parsed <script> element's would not.
    for path, table in (
        ("/dlq", "#dlq-table"),
        ("/controls", "#pauses-table"),
        (f"/dlq/confirm?action=discard&ids={task}", "#confirm-table"),
        ("/audit", "#audit-table"),
    ):
        page.goto(dashboard + path)
        expect(page.locator(table)).to_contain_text(XSS)
    assert tab.dialogs == []  # (checked again at teardown, after every page)


def test_log_in_with_the_token_and_act(dsn: str, browser: Browser, tmp_path: Path) -> None:
    """The session cookie is Secure, and Chromium keeps it on http://127.0.0.1 (loopback is a
    secure context), so the token setup works without TLS on the operator's own machine."""
    with serve(dsn, tmp_path / "dashboard.log", token=TOKEN) as base:
        context = browser.new_context()
        tab = Tab(context.new_page())
        page = tab.page
        page.goto(base + "/controls")
        expect(page).to_have_url(base + "/login?next=/controls")
        page.fill('input[name="token"]', "not-the-token")
        page.click('#login-form button[type="submit"]')
        expect(page.locator(".form-error")).to_have_text("wrong token")
        assert tab.errors == [
            "Failed to load resource: the server responded with a status of 401 (Unauthorized)"
        ]
        tab.errors.clear()  # Chromium logs the 401 of the refused login; nothing else may fail
        page.fill('input[name="token"]', TOKEN)
        page.click('#login-form button[type="submit"]')
        expect(page).to_have_url(base + "/controls")
        cookie = next(c for c in context.cookies() if c["name"] == "taskq_session")
        assert cookie["httpOnly"] and cookie["secure"] and cookie["sameSite"] == "Strict"
        page.fill('#pause-form input[name="name"]', "dash.ok")
        page.click('#pause-form button[type="submit"]')
        expect(page.locator(".flash")).to_contain_text("Paused.")
        assert [r["name"] for r in rows(dsn, "SELECT name FROM taskq.pauses")] == ["dash.ok"]
        page.click("header button")  # log out
        expect(page).to_have_url(base + "/login")
        page.goto(base + "/")
        expect(page).to_have_url(base + "/login?next=/")
        context.close()
        assert tab.dialogs == [] and tab.errors == [], (tab.dialogs, tab.errors)


def test_abort_a_running_task_from_its_page(
    dsn: str, dashboard: str, tab: Tab, tmp_path: Path
) -> None:
    task = insert(dsn, task_type="'dash.forever'")
    worker(dsn, tmp_path)
    wait_until_sync(
        lambda: (
            rows(dsn, f"SELECT status FROM taskq.tasks WHERE id = {task}")[0]["status"]
            == "PROCESSING"
        ),
        what="the task to start",
    )
    page = tab.page
    page.goto(f"{dashboard}/tasks/{task}")
    expect(page.locator("#cancel-form h3")).to_have_text("Abort this running task")
    page.fill('#cancel-form input[name="note"]', "customer withdrew")
    page.click('#cancel-form button[type="submit"]')
    expect(page.locator(".flash")).to_contain_text("Abort requested")
    # The worker cancels the coroutine at once; the live page shows the final status.
    expect(page.locator("#task-status")).to_have_text("CANCELLED", timeout=10000)
    [audit] = rows(dsn, "SELECT action, note, detail FROM taskq.audit")
    assert (audit["action"], audit["note"]) == ("abort_requested", "customer withdrew")
    expect(page.locator("#cancel-form")).to_have_count(0)
    shot(page, "aborted")


def test_handle_an_error_group_and_flip_a_switch(dsn: str, dashboard: str, tab: Tab) -> None:
    for i in range(6):
        dead(dsn, "dash.ok", f"HTTPError: 503 for order {i}", 2)
    dead(dsn, "dash.ok", f"KeyError: {XSS}", 1)
    page = tab.page
    page.goto(dashboard + "/dlq/groups")
    expect(page.locator("#groups-table tbody tr[data-group]")).to_have_count(2)
    first = page.locator("#groups-table tbody tr[data-group]").first
    expect(first.locator('td[data-k="total"]')).to_have_text("6")
    group = first.get_attribute("data-group")
    first.locator("td a.mono").click()
    expect(page.locator("#dlq-table tbody tr[data-task-id]")).to_have_count(6)
    page.fill('#assign-form input[name="to"]', "ana")
    page.click('#assign-form button[type="submit"]')
    expect(page.locator(".flash")).to_have_text("Assigned 6 dead letter(s).")
    expect(page.locator('#dlq-table td.handling[data-state="investigating"]')).to_have_count(6)

    page.goto(dashboard + "/dlq?state=new")
    expect(page.locator("#dlq-table tbody tr[data-task-id]")).to_have_count(1)
    page.select_option('#resolve-form select[name="resolution"]', "ignored")
    page.fill('#resolve-form input[name="note"]', "bad test data")
    page.click('#resolve-form button[type="submit"]')
    expect(page.locator(".flash")).to_have_text("Resolved 1 dead letter(s).")
    expect(page.locator("#dlq-table tbody tr[data-task-id]")).to_have_count(0)

    page.goto(dashboard + "/dlq/groups")
    expect(page.locator(f'#report-open tr[data-group="{group}"]')).to_have_count(1)
    expect(page.locator("#report-resolved")).to_contain_text("ignored")
    shot(page, "error-groups")

    page.goto(dashboard + "/controls")
    page.fill('#switch-form input[name="name"]', "sms.sending")
    page.fill('#switch-form input[name="note"]', "provider incident")
    page.click('#switch-form button[type="submit"]')
    expect(page.locator(".flash")).to_contain_text("Switch set.")
    row = page.locator('#switches-table tr[data-switch="sms.sending"]')
    expect(row).to_have_attribute("data-enabled", "off")
    row.locator('button[type="submit"]').click()
    expect(row).to_have_attribute("data-enabled", "on")
    assert [r["enabled"] for r in rows(dsn, "SELECT enabled FROM taskq.switches")] == [True]
    shot(page, "switches")


def test_the_panel_charts_browser_task_and_workers(
    dsn: str, dashboard: str, tab: Tab, tmp_path: Path
) -> None:
    """After a mixed run: the overview's four charts have data, the task browser filters by
    biz_id and by status, a running task found there shows its progress live, and the workers
    page lists the worker. Screenshots of each go to tests/artifacts (the README shows them)."""
    for n in range(20):
        insert(dsn, task_type="'dash.ok'", biz_id=f"'order-{n}'")
    go, finish = tmp_path / "go", tmp_path / "finish"
    payload = json.dumps({"go": str(go), "finish": str(finish)})
    running = insert(dsn, task_type="'dash.steps'", payload=f"'{payload}'", biz_id="'report-1'")
    worker(dsn, tmp_path)
    wait_until_sync(
        lambda: (
            rows(dsn, "SELECT count(*) AS n FROM taskq.tasks WHERE status = 'SUCCESS'")[0]["n"]
            == 20
            and rows(dsn, "SELECT count(*) AS n FROM taskq.backlog_samples")[0]["n"] > 0
        ),
        timeout=60,
        what="the run to finish and a backlog sample",
    )
    page = tab.page
    page.goto(f"{dashboard}/?range=15m")
    charts = page.locator("img.chart")
    expect(charts).to_have_count(4)
    for i in range(4):
        img = charts.nth(i)
        page.wait_for_function(
            "img => img.complete && img.naturalWidth > 0", arg=img.element_handle()
        )
        src = img.get_attribute("src") or ""  # the page may have refreshed it (absolute then)
        svg = page.request.get(urllib.parse.urljoin(dashboard + "/", src)).text()
        key = img.get_attribute("data-chart")
        if key == "retries":
            assert 'data-value="20"' in svg, key
        else:
            assert 'class="series"' in svg and "no data" not in svg, key
    shot(page, "overview-charts")

    page.goto(f"{dashboard}/tasks")
    page.fill('input[name="biz_id"]', "order-7")
    page.click('form.filters button[type="submit"]')
    expect(page.locator("#browse tbody tr")).to_have_count(1)
    expect(page.locator("#browse tbody tr").first).to_have_attribute("data-status", "SUCCESS")
    page.fill('input[name="biz_id"]', "")
    page.select_option('select[name="status"]', "PROCESSING")
    page.click('form.filters button[type="submit"]')
    expect(page.locator(f'#browse tr[data-id="{running}"]')).to_have_count(1)
    shot(page, "task-browser")
    page.click(f'#browse tr[data-id="{running}"] a[href="/tasks/{running}"]')
    expect(page.locator("#task-status")).to_have_text("PROCESSING")
    page.evaluate("window.sameDocument = true")
    go.touch()
    expect(page.locator("#task-percent")).to_have_text("50%", timeout=10000)
    assert page.evaluate("window.sameDocument") is True
    shot(page, "task-page")
    finish.touch()
    expect(page.locator("#task-status")).to_have_text("SUCCESS", timeout=10000)

    page.goto(f"{dashboard}/workers")
    expect(page.locator('#workers tr[data-alive="yes"]')).to_have_count(1)
    shot(page, "workers")
