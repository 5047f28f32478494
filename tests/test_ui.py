"""The UI plugin's parts that need no running Airflow (the deployed view: tests/e2e/test_ui_plugin.py):
its registration, whose token it reads with, and the page it makes of runs and XCom results."""

from __future__ import annotations

import ast
import subprocess
import sys
try:
    import tomllib
except ImportError:  # Python 3.10: its backport, which pip and pytest bring
    import tomli as tomllib
from pathlib import Path

from airflow_gpu_sched.ui import PREFIX
from airflow_gpu_sched.ui.page import nights_of, render, waiting_rows
from airflow_gpu_sched.ui.source import TRAINING_OPERATORS, RunRecord, TaskRecord, credential
from tests.test_timeline import CANCELLED, PLAN

REPO = Path(__file__).resolve().parent.parent


def test_the_package_registers_the_plugin_by_its_entry_point():
    from airflow.plugins_manager import AirflowPlugin

    entry = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["entry-points"]["airflow.plugins"]
    module, _, name = entry["airflow_gpu_sched"].partition(":")
    plugin = getattr(__import__(module, fromlist=[name]), name)
    assert issubclass(plugin, AirflowPlugin) and plugin.name == "airflow_gpu_sched"
    assert [app["url_prefix"] for app in plugin.fastapi_apps] == [PREFIX]
    assert {v["destination"] for v in plugin.external_views} == {"dag_run", "dag", "nav"}
    # each view opens a route of the app, relative to the UI's base URL
    assert all(v["href"].startswith(PREFIX.lstrip("/") + "/") for v in plugin.external_views)


def test_loading_the_plugin_imports_neither_fastapi_nor_the_operators():
    """Airflow loads plugins in every component; the web app is built at its first request."""
    code = ("import sys, airflow.plugins_manager; before = set(sys.modules); import airflow_gpu_sched.ui.plugin; "
            "print(sorted(set(sys.modules) - before))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}).stdout
    added = set(ast.literal_eval(out))
    assert "airflow_gpu_sched.ui.plugin" in added
    assert added <= {"airflow_gpu_sched", "airflow_gpu_sched.ui", "airflow_gpu_sched.ui.plugin"}, added


def test_the_plugin_warns_when_the_package_is_installed_twice(tmp_path, monkeypatch, caplog):
    """A second copy (a stale egg-info on PYTHONPATH) loads our entry point twice and the Task SDK
    drops the plugins after it in tasks (apache/airflow#72253): the plugin says so when it loads."""
    import logging

    from airflow_gpu_sched.ui.plugin import GpuSchedPlugin, duplicate_installs

    # A clean venv has one copy ([]); an editable install run from its checkout may show two (the
    # build's egg-info in the checkout): the stale copy below adds one either way.
    before = duplicate_installs()
    stale = tmp_path / "airflow_gpu_sched.egg-info"
    stale.mkdir()
    (stale / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: airflow-gpu-sched\nVersion: 0.0.1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    after = duplicate_installs()
    assert str(tmp_path) in after and len(after) == max(len(before), 1) + 1
    # a handler on the plugin's own logger: Airflow's logging setup may stop propagation to caplog
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append
    plugin_log = logging.getLogger("airflow_gpu_sched.ui.plugin")
    plugin_log.addHandler(handler)
    monkeypatch.setattr(plugin_log, "disabled", False)
    monkeypatch.setattr(plugin_log, "level", logging.NOTSET)
    try:
        GpuSchedPlugin.on_load()
    finally:
        plugin_log.removeHandler(handler)
    [warning] = [r.getMessage() for r in records]
    assert f"installed {len(after)} times" in warning and str(tmp_path) in warning and "72253" in warning


def test_it_reads_as_the_caller_bearer_first_then_the_ui_session_cookie():
    assert credential({"authorization": "Bearer abc"}, {"_token": "cookie"}) == "abc"
    assert credential({}, {"_token": "cookie"}) == "cookie"
    assert credential({"authorization": "Basic dXNlcg=="}, {}) is None
    assert credential({}, {}) is None


def test_it_reads_every_public_training_operator():
    import airflow_gpu_sched.operators as operators

    public = {n for n in operators.__all__ if n.endswith("Operator")}
    assert public <= set(TRAINING_OPERATORS)


def _runs() -> list[RunRecord]:
    return [RunRecord("nightly", "scheduled__2026-11-30", "2026-11-30T22:00:00Z", "running", [
        TaskRecord("evaluate_on_gpu", -1, "success", CANCELLED),
        TaskRecord("train", -1, "success", PLAN),
        TaskRecord("train_more", 2, "deferred")])]


def test_the_page_shows_tasks_without_a_result_yet_and_who_waited_longest_first():
    night = nights_of(_runs())[0]
    assert [t.name for t in night.tasks] == ["evaluate_on_gpu", "train", "train_more[2]"]
    assert night.tasks[2].note == "deferred: no result yet" and night.tasks[2].attempts == ()
    rows = waiting_rows([night])
    assert [r[1] for r in rows] == ["train", "evaluate_on_gpu"]
    assert rows[0][3] == "PERSISTENT_RESOURCE us-central1 > FLEX_START us-central1 > SPOT us-central1"
    assert rows[0][6:] == (7, 2, "30.50 USD")  # preemptions, fallbacks, cost


def test_the_page_escapes_what_users_named():
    runs = [RunRecord("<script>x</script>", "r", None, "success", [TaskRecord("<b>t</b>", -1, "success", PLAN)])]
    html = render(runs, "GPU training of <script>x</script>", [("home", "/gpu-sched/?a=<b>")])
    assert "<script>" not in html and "<b>" not in html
    assert "&lt;b&gt;t&lt;/b&gt;" in html


def test_an_unreadable_result_is_a_row_saying_so_and_the_page_still_renders():
    """XCom is written by whatever ran the task: a malformed result is one row's note, not a 500."""
    bad = [{"attempts": [{"strategy": 7, "queued_seconds": "x"}]}, {"attempts": ["not a dict"]},
           {"attempts": [{"start": "not a time"}]}]
    runs = [RunRecord("nightly", "r", None, "success",
                      [TaskRecord(f"t{i}", -1, "success", value) for i, value in enumerate(bad)] +
                      [TaskRecord("train", -1, "success", PLAN)])]
    night = nights_of(runs)[0]
    notes = {t.name: t.note for t in night.tasks}
    assert any(n and n.startswith("unreadable result") for n in notes.values()), notes
    assert night.tasks[-1].attempts  # the good result is still shown
    html = render(runs, "nightly", [])
    assert "unreadable result" in html and "train" in html


def _asgi_get(app, scope_server) -> tuple[int, str, list]:
    """One GET straight through the ASGI app, with the ``server`` the scope is given; records
    every outgoing HTTP request the page would make."""
    import asyncio

    import httpx

    sent: list = []
    original = httpx.AsyncClient.send

    async def record(self, request, **kw):
        sent.append(str(request.url))
        return await original(self, request, **kw)

    async def run():
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
                 "path": "/", "raw_path": b"/", "root_path": "", "query_string": b"",
                 "headers": [(b"authorization", b"Bearer user-token"), (b"host", b"evil.example")],
                 "client": ("127.0.0.1", 5000), "server": scope_server}
        if scope_server is None:
            del scope["server"]
        out: dict = {"body": b""}

        async def receive():
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message):
            if message["type"] == "http.response.start":
                out["status"] = message["status"]
            elif message["type"] == "http.response.body":
                out["body"] += message.get("body", b"")

        httpx.AsyncClient.send = record
        try:
            await app(scope, receive, send)
        finally:
            httpx.AsyncClient.send = original
        return out["status"], out["body"].decode(), sent

    return asyncio.run(run())


def test_without_a_server_address_the_page_sends_the_token_nowhere():
    from airflow_gpu_sched.ui.app import create_app

    status, html, sent = _asgi_get(create_app(), None)
    assert status == 503 and "scope[&#x27;server&#x27;]" in html or "scope['server']" in html, html[-500:]
    assert sent == []  # no request to 127.0.0.1:8080 (nor the forged Host)
