"""The operator's web page: routes over the same domain functions the CLI calls.

Pages are rendered on the server by Jinja2 with autoescaping on, so every task type, payload,
error and note is text, never markup; the page's own script only fetches JSON and sets
``textContent``. Database work runs in worker threads (sync psycopg, short sessions, exactly
like the CLI); only the live-progress stream holds a connection, an async one of its own.
Every action goes through ``dlq``, ``switches`` or ``ops`` with the dashboard's actor, so it
lands in ``taskq.audit`` in the same statement as the change.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

import jinja2
import psycopg
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from taskq.dashboard import charts, ops, views
from taskq.dashboard.live import progress_events
from taskq.dashboard.security import (
    SESSION_SECONDS,
    Guard,
    Keys,
    auth_of,
    check_binding,
    local_path,
    session_cookie,
)
from taskq.db.connection import first_line
from taskq.errors import ConfigError, DatabaseUnavailable, TaskNotFound, TaskqError
from taskq.model import DEFAULT_MAX_PAYLOAD_BYTES, Resolution, check_name
from taskq.ops import audit as audit_ops
from taskq.ops import cancel as cancelling
from taskq.ops import dlq, panel, stats, switches
from taskq.ops import tasks as tasks_ops

HERE = Path(__file__).resolve().parent

FLASH = {
    "requeued": "Requeued {n} dead letter(s).",
    "discarded": "Discarded {n} dead letter(s); the audit keeps a copy of each.",
    "paused": "Paused. Workers stop claiming it within a second.",
    "already_paused": "It was paused already.",
    "resumed": "Resumed.",
    "not_paused": "It was not paused.",
    "reset": "Closed {n} breaker(s).",
    "level": "Protection level set.",
    "level_unchanged": "The level was that already.",
    "assigned": "Assigned {n} dead letter(s).",
    "resolved": "Resolved {n} dead letter(s).",
    "cancelled": "Cancelled.",
    "abort_requested": "Abort requested: the running attempt stops and ends CANCELLED.",
    "already_cancelled": "It was cancelled already.",
    "switched": "Switch set. Running handlers see it within a second.",
    "switch_unchanged": "The switch was set that way already.",
}
AUDIT_LIMITS = (50, 200, 1000)


def default_actor() -> str:
    return f"{dlq.actor()} via dashboard"


@dataclass(frozen=True, slots=True)
class DashboardSettings:
    dsn: str
    host: str = "127.0.0.1"
    auth_token: str | None = None
    read_only: bool = False
    actor: str = field(default_factory=default_actor)
    """Recorded in the audit table for every action taken through this dashboard."""
    overview_minutes: int = 60
    refresh_seconds: float = 2.0
    max_streams: int = 20
    """Live-progress streams at once; each holds a database connection."""
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    page_limit: int = 200
    bulk_limit: int = 1000


Form = dict[str, str]


async def read_form(request: Request) -> Form:
    """A URL-encoded form (the only kind the pages send; no uploads, so no multipart parser).
    The first value of a repeated field wins."""
    if request.headers.get("content-type", "").split(";")[0].strip() != (
        "application/x-www-form-urlencoded"
    ):
        raise HTTPException(415, "send the form URL-encoded")
    try:
        pairs = parse_qsl(
            (await request.body()).decode(), keep_blank_values=True, max_num_fields=50
        )
    except (UnicodeDecodeError, ValueError):
        raise HTTPException(400, "malformed form") from None
    form: Form = {}
    for key, value in pairs:
        form.setdefault(key, value)
    return form


def _text(form: Form, name: str) -> str | None:
    return form.get(name, "").strip() or None


def _ids(text: str | None, limit: int) -> tuple[int, ...]:
    parts = [p for p in (text or "").replace(" ", ",").split(",") if p]
    if not parts:
        raise ConfigError("no task ids given")
    if len(parts) > limit:
        raise ConfigError(f"at most {limit} tasks at once")
    try:
        return tuple(int(p) for p in parts)
    except ValueError:
        raise ConfigError(f"task ids are numbers, got {text!r}") from None


class Dashboard:
    """The routes; one instance per app, holding its settings and per-process keys."""

    def __init__(self, settings: DashboardSettings, stopping: Callable[[], bool]) -> None:
        self.settings = settings
        self.stopping = stopping
        self.keys = Keys(settings.auth_token)
        env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        env.globals.update(
            age=views.age,
            when=views.when,
            pretty_json=views.pretty_json,
            pct=views.pct,
            mib=views.mib,
        )
        self.templates = Jinja2Templates(env=env)
        self.streams = 0

    # --- rendering -----------------------------------------------------------------------------

    def page(self, request: Request, name: str, status: int = 200, **context: Any) -> Response:
        auth = auth_of(request)
        done = request.query_params.get("done", "")
        n = request.query_params.get("n", "0")
        flash = FLASH.get(done, "").format(n=int(n) if n.isdigit() else 0)
        base = {
            "read_only": self.settings.read_only,
            "can_act": not self.settings.read_only,
            "csrf": self.keys.csrf(auth),
            "logged_in": auth.how == "session",
            "flash": flash,
            "page": name.removesuffix(".html"),
        }
        return self.templates.TemplateResponse(
            request, name, {**base, **context}, status_code=status
        )

    async def form_of(self, request: Request) -> Form:
        """The POSTed form, once its CSRF token is checked (403 otherwise)."""
        form = await read_form(request)
        if not self.keys.csrf_ok(auth_of(request), form.get("csrf")):
            raise HTTPException(403, "missing or stale CSRF token: reload the page and try again")
        return form

    # --- overview ------------------------------------------------------------------------------

    async def overview_model(self) -> dict[str, Any]:
        report = await run_in_threadpool(
            stats.report, self.settings.dsn, self.settings.overview_minutes
        )
        return views.overview(report)

    async def overview(self, request: Request) -> Response:
        return self.page(
            request,
            "overview.html",
            range_key=self._range(request),
            ranges=list(panel.RANGES),
            o=await self.overview_model(),
            headers=views.HEADERS,
            empty=views.EMPTY,
            refresh_ms=int(self.settings.refresh_seconds * 1000),
        )

    async def overview_json(self, request: Request) -> Response:
        return JSONResponse(await self.overview_model())

    # --- charts, the task browser, workers ----------------------------------------------------

    def _range(self, request: Request) -> str:
        key = request.query_params.get("range") or "1h"
        panel.minutes_of(key)  # ConfigError (400) on anything else
        return key

    async def chart_svg(self, request: Request) -> Response:
        """One chart as an SVG image (the overview and the type pages embed these)."""
        key = str(request.path_params["chart"])
        range_key = self._range(request)
        task_type = request.query_params.get("task_type") or None
        found = await run_in_threadpool(
            panel.charts, self.settings.dsn, range_key, task_type=task_type
        )
        chart = next((c for c in found if c.key == key), None)
        if chart is None:
            raise HTTPException(404, f"no chart {key!r}")
        end = time.time()
        svg = charts.render(chart, start=end - 60 * panel.RANGES[range_key], end=end)
        return Response(svg, media_type="image/svg+xml", headers={"Cache-Control": "no-store"})

    async def task_type_page(self, request: Request) -> Response:
        task_type = str(request.path_params["task_type"])
        range_key = self._range(request)
        return self.page(
            request,
            "type.html",
            task_type=task_type,
            range_key=range_key,
            ranges=list(panel.RANGES),
            chart_keys=["outcomes", "latency", "retries"],
            refresh_ms=int(self.settings.refresh_seconds * 1000),
        )

    async def browse(self, request: Request) -> Response:
        flt = _browse_filters(request.query_params)
        found = await run_in_threadpool(panel.browse, self.settings.dsn, flt)
        params = {k: v for k, v in request.query_params.items() if v and k != "before_id"}
        older = (
            urlencode({**params, "before_id": found.next_before_id})
            if found.next_before_id
            else None
        )
        return self.page(
            request,
            "tasks.html",
            flt=flt,
            found=found,
            statuses=panel.STATUSES,
            older=older,
            first=urlencode(params),
        )

    async def workers(self, request: Request) -> Response:
        rows = await run_in_threadpool(panel.workers, self.settings.dsn)
        return self.page(request, "workers.html", workers=rows)

    # --- dead letters --------------------------------------------------------------------------

    async def dead_letters(self, request: Request) -> Response:
        flt = ops.DeadFilter.parse(request.query_params)
        found = await run_in_threadpool(
            ops.search_dead, self.settings.dsn, flt, limit=self.settings.page_limit
        )
        return self.page(
            request, "dlq.html", flt=flt, found=found, filter_query=urlencode(flt.params())
        )

    async def confirm(self, request: Request) -> Response:
        """What a requeue or discard would touch, and the form that does it. The form carries
        the ids shown, so the action touches exactly what the operator saw (all or nothing)."""
        params = request.query_params
        action = params.get("action")
        if action not in ("requeue", "discard"):
            raise ConfigError("action must be requeue or discard")
        flt = ops.DeadFilter.parse(params)
        if params.get("ids"):
            ids = _ids(params.get("ids"), self.settings.bulk_limit)
            rows = await run_in_threadpool(dlq.preview, self.settings.dsn, dlq.Selection(ids=ids))
            matching = len(rows)
        else:
            found = await run_in_threadpool(
                ops.search_dead, self.settings.dsn, flt, limit=self.settings.bulk_limit
            )
            rows, matching = found.rows, found.matching
        if not rows:
            raise TaskNotFound("no dead letters match: nothing to do")
        return self.page(
            request,
            "confirm.html",
            action=action,
            rows=rows,
            matching=matching,
            ids=",".join(str(r["id"]) for r in rows),
            filter_query=urlencode(flt.params()),
        )

    async def act(self, request: Request) -> Response:
        form = await self.form_of(request)
        ids = _ids(_text(form, "ids"), self.settings.bulk_limit)
        note = _text(form, "note")
        selection = dlq.Selection(ids=ids)
        if request.url.path.endswith("/requeue"):
            done = await run_in_threadpool(
                dlq.requeue,
                self.settings.dsn,
                selection,
                reset_retries=form.get("reset_retries") == "on",
                note=note,
                by=self.settings.actor,
            )
            verb = "requeued"
        else:
            done = await run_in_threadpool(
                dlq.discard, self.settings.dsn, selection, note=note, by=self.settings.actor
            )
            verb = "discarded"
        back = local_path(_text(form, "back") or "/dlq")
        joiner = "&" if "?" in back else "?"
        return RedirectResponse(f"{back}{joiner}done={verb}&n={len(done)}", 303)

    async def handle(self, request: Request) -> Response:
        """The handling record of the dead letters shown: assign them, or resolve them."""
        form = await self.form_of(request)
        ids = _ids(_text(form, "ids"), self.settings.bulk_limit)
        note = _text(form, "note")
        selection = dlq.Selection(ids=ids)
        if _text(form, "what") == "assign":
            rows = await run_in_threadpool(
                dlq.assign,
                self.settings.dsn,
                selection,
                to=_text(form, "to") or "",
                note=note,
                by=self.settings.actor,
            )
            done = "assigned"
        elif _text(form, "what") == "resolve":
            raw = _text(form, "resolution")
            if raw not in (Resolution.FIXED.value, Resolution.IGNORED.value):
                raise ConfigError("resolve as fixed or ignored")
            rows = await run_in_threadpool(
                dlq.resolve,
                self.settings.dsn,
                selection,
                resolution=Resolution(raw),
                note=note,
                by=self.settings.actor,
            )
            done = "resolved"
        else:
            raise ConfigError("what must be assign or resolve")
        back = local_path(_text(form, "back") or "/dlq")
        joiner = "&" if "?" in back else "?"
        return RedirectResponse(f"{back}{joiner}done={done}&n={len(rows)}", 303)

    async def groups(self, request: Request) -> Response:
        """Dead letters by error group, and the twice-a-day report."""
        raw = (request.query_params.get("since") or "12").strip()
        try:
            since_hours = float(raw)
        except ValueError:
            raise ConfigError(f"since is a number of hours, got {raw!r}") from None
        if not 0 < since_hours <= 24 * 365:
            raise ConfigError("since is a number of hours, more than 0")
        dsn = self.settings.dsn
        found = await run_in_threadpool(dlq.groups, dsn)
        report = await run_in_threadpool(dlq.report, dsn, since_seconds=since_hours * 3600)
        return self.page(
            request, "groups.html", groups=found, report=report, since=f"{since_hours:g}"
        )

    # --- one task ------------------------------------------------------------------------------

    async def cancel(self, request: Request) -> Response:
        task_id = int(request.path_params["task_id"])
        form = await self.form_of(request)
        result = await run_in_threadpool(
            cancelling.cancel,
            self.settings.dsn,
            cancelling.Target(ids=(task_id,)),
            with_children=form.get("with_children") == "on",
            note=_text(form, "note"),
            by=self.settings.actor,
        )
        if task_id in result.aborting:
            done = "abort_requested"
        elif task_id in result.already:
            done = "already_cancelled"
        else:
            done = "cancelled"
        return RedirectResponse(f"/tasks/{task_id}?done={done}", 303)

    async def task(self, request: Request) -> Response:
        return await self._task_page(request, int(request.path_params["task_id"]))

    async def _task_page(
        self, request: Request, task_id: int, *, status: int = 200, **extra: Any
    ) -> Response:
        detail = await run_in_threadpool(tasks_ops.task_detail, self.settings.dsn, task_id)
        full = request.query_params.get("full") == "1"
        payload_text, payload_cut = views.payload_preview(
            detail.row["payload"] if detail.row else None, full=full
        )
        context: dict[str, Any] = {
            "edit_error": "",
            "edit_text": None,
            "payload_text": payload_text,
            "payload_cut": payload_cut,
            **extra,
        }
        return self.page(request, "task.html", status, task_id=task_id, d=detail, **context)

    async def task_events(self, request: Request) -> Response:
        task_id = int(request.path_params["task_id"])
        if self.streams >= self.settings.max_streams:
            raise HTTPException(503, "too many live streams open; try again later")

        async def over() -> bool:
            return self.stopping() or await request.is_disconnected()

        return StreamingResponse(
            self._counted(progress_events(self.settings.dsn, task_id, over)),
            media_type="text/event-stream",
            headers={"x-accel-buffering": "no"},
        )

    async def _counted(self, events: AsyncGenerator[str, None]) -> AsyncGenerator[str, None]:
        """Counts open streams, and closes the stream's generator (and so its connection) as
        soon as the response ends, instead of whenever the garbage collector gets to it."""
        self.streams += 1
        try:
            async with contextlib.aclosing(events):
                async for chunk in events:
                    yield chunk
        finally:
            self.streams -= 1

    async def requeue_edited(self, request: Request) -> Response:
        task_id = int(request.path_params["task_id"])
        form = await self.form_of(request)
        text = form.get("payload", "")
        try:
            await run_in_threadpool(
                ops.requeue_edited,
                self.settings.dsn,
                task_id,
                text,
                reset_retries=form.get("reset_retries") == "on",
                note=_text(form, "note"),
                by=self.settings.actor,
                max_payload_bytes=self.settings.max_payload_bytes,
            )
        except TaskqError as exc:
            if isinstance(exc, DatabaseUnavailable):
                raise
            return await self._task_page(
                request, task_id, status=400, edit_error=str(exc), edit_text=text
            )
        return RedirectResponse(f"/tasks/{task_id}?done=requeued&n=1", 303)

    # --- audit ---------------------------------------------------------------------------------

    async def audit(self, request: Request) -> Response:
        params = request.query_params
        action = params.get("action") or None
        if action is not None and action not in audit_ops.AUDIT_ACTIONS:
            raise ConfigError(f"unknown action {action!r}")
        raw_id = (params.get("task_id") or "").strip()
        if raw_id and not raw_id.isdigit():
            raise ConfigError(f"task id must be a number, got {raw_id!r}")
        task_type = (params.get("task_type") or "").strip() or None
        limit = int(params.get("limit", "50")) if params.get("limit", "50").isdigit() else 50
        limit = limit if limit in AUDIT_LIMITS else 50
        rows = await run_in_threadpool(
            audit_ops.audit_log,
            self.settings.dsn,
            action=action,
            task_id=int(raw_id) if raw_id else None,
            task_type=task_type,
            limit=limit,
        )
        return self.page(
            request,
            "audit.html",
            rows=rows,
            actions=audit_ops.AUDIT_ACTIONS,
            limits=AUDIT_LIMITS,
            q={"action": action or "", "task_id": raw_id, "task_type": task_type or ""},
            limit=limit,
        )

    # --- pauses and the circuit ----------------------------------------------------------------

    async def controls(self, request: Request) -> Response:
        dsn = self.settings.dsn
        pauses = await run_in_threadpool(switches.pauses, dsn)
        business = await run_in_threadpool(switches.switch_list, dsn)
        circuit = await run_in_threadpool(switches.circuit_status, dsn)
        queues, types = await run_in_threadpool(ops.known_names, dsn)
        return self.page(
            request,
            "controls.html",
            pauses=pauses,
            business=business,
            circuit=circuit,
            queues=queues,
            types=types,
            level_class=views.level_class(int(circuit["level"])),
        )

    async def switch(self, request: Request) -> Response:
        form = await self.form_of(request)
        dsn, by, note = self.settings.dsn, self.settings.actor, _text(form, "note")
        what = request.path_params["what"]
        if what in ("pause", "resume"):
            raw_kind = _text(form, "kind")
            if raw_kind not in ("task_type", "queue"):
                raise ConfigError("kind must be task_type or queue")
            kind: switches.Kind = "queue" if raw_kind == "queue" else "task_type"
            name = check_name(kind.replace("_", " "), form.get("name", ""))
            if what == "pause":
                changed = await run_in_threadpool(
                    switches.pause, dsn, kind=kind, name=name, note=note, by=by
                )
                done = "paused" if changed else "already_paused"
            else:
                changed = await run_in_threadpool(
                    switches.resume, dsn, kind=kind, name=name, note=note, by=by
                )
                done = "resumed" if changed else "not_paused"
            return RedirectResponse(f"/controls?done={done}", 303)
        if what == "switch-set":
            name = check_name("switch name", form.get("name", ""))
            value = _text(form, "value")
            if value not in ("on", "off"):
                raise ConfigError("a switch is on or off")
            changed = await run_in_threadpool(
                switches.switch_set, dsn, name, value == "on", note=note, by=by
            )
            return RedirectResponse(
                f"/controls?done={'switched' if changed else 'switch_unchanged'}", 303
            )
        if what == "circuit-reset":
            task_type = _text(form, "task_type")
            result = await run_in_threadpool(
                switches.circuit_reset, dsn, task_type=task_type, note=note, by=by
            )
            closed = len(result["closed_breakers"])
            return RedirectResponse(f"/controls?done=reset&n={closed}", 303)
        if what == "level":
            raw = _text(form, "level") or ""
            if not raw.isdigit():
                raise ConfigError("the level is a number from 0 to 4")
            changed = await run_in_threadpool(switches.set_level, dsn, int(raw), note=note, by=by)
            return RedirectResponse(
                f"/controls?done={'level' if changed else 'level_unchanged'}", 303
            )
        raise HTTPException(404, "no such control")

    # --- login ---------------------------------------------------------------------------------

    async def login_form(self, request: Request) -> Response:
        if self.keys.token is None:
            return RedirectResponse("/", 303)
        return self.page(request, "login.html", next=local_path(request.query_params.get("next")))

    async def login(self, request: Request) -> Response:
        form = await read_form(request)
        target = local_path(_text(form, "next"))
        if self.keys.token is None:
            return RedirectResponse("/", 303)
        if not self.keys.token_matches(form.get("token", "").strip()):
            await asyncio.sleep(0.5)  # slows down guessing; the token is long anyway
            return self.page(request, "login.html", 401, next=target, error="wrong token")
        response = RedirectResponse(target, 303)
        session_cookie(response, request, self.keys.new_session(), SESSION_SECONDS)
        return response

    async def logout(self, request: Request) -> Response:
        await self.form_of(request)
        response = RedirectResponse("/login" if self.keys.token else "/", 303)
        session_cookie(response, request, "", 0)
        return response

    # --- errors --------------------------------------------------------------------------------

    async def error(self, request: Request, exc: Exception) -> Response:
        if isinstance(exc, HTTPException):
            status, message = exc.status_code, str(exc.detail)
        elif isinstance(exc, DatabaseUnavailable):
            status, message = 503, str(exc)
        elif isinstance(exc, TaskNotFound):
            status, message = 404, str(exc)
        elif isinstance(exc, TaskqError):
            status, message = 400, str(exc)
        elif isinstance(exc, psycopg.Error):
            status, message = 500, f"database refused: {first_line(exc)}"
        else:  # pragma: no cover - registered only for the classes above
            raise exc
        if request.url.path.startswith("/api/") or request.url.path.endswith("/events"):
            return JSONResponse({"error": message}, status)
        return self.page(request, "error.html", status, message=message, code=status)


def create_app(
    settings: DashboardSettings, *, stopping: Callable[[], bool] = lambda: False
) -> Starlette:
    """The ASGI app. Refuses (ConfigError) a non-loopback host without a token, so no caller
    can build an open dashboard by accident. ``stopping`` tells the live streams, which never
    end on their own, that the server is shutting down."""
    check_binding(settings.host, settings.auth_token)
    d = Dashboard(settings, stopping)
    routes = [
        Route("/", d.overview),
        Route("/charts/{chart}.svg", d.chart_svg),
        Route("/types/{task_type:path}", d.task_type_page),
        Route("/tasks", d.browse),
        Route("/workers", d.workers),
        Route("/api/overview", d.overview_json),
        Route("/dlq", d.dead_letters),
        Route("/dlq/confirm", d.confirm),
        Route("/dlq/requeue", d.act, methods=["POST"]),
        Route("/dlq/discard", d.act, methods=["POST"]),
        Route("/dlq/handle", d.handle, methods=["POST"]),
        Route("/dlq/groups", d.groups),
        Route("/tasks/{task_id:int}/cancel", d.cancel, methods=["POST"]),
        Route("/tasks/{task_id:int}", d.task),
        Route("/tasks/{task_id:int}/events", d.task_events),
        Route("/tasks/{task_id:int}/requeue-edited", d.requeue_edited, methods=["POST"]),
        Route("/audit", d.audit),
        Route("/controls", d.controls),
        Route("/controls/{what}", d.switch, methods=["POST"]),
        Route("/login", d.login_form),
        Route("/login", d.login, methods=["POST"]),
        Route("/logout", d.logout, methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    # Room for the largest payload an operator may save, form-encoded (up to 3 bytes a byte).
    max_body = 3 * settings.max_payload_bytes + 64 * 1024
    app = Starlette(
        routes=routes,
        middleware=[
            Middleware(Guard, keys=d.keys, read_only=settings.read_only, max_body_bytes=max_body)
        ],
        exception_handlers={
            HTTPException: d.error,
            TaskqError: d.error,
            psycopg.Error: d.error,
        },
    )
    app.state.dashboard = d  # tests reach the per-process keys through it
    return app


def _browse_filters(params: Any) -> panel.Filters:
    """The task browser's filters from the query string; bad numbers are a 400, not a 500."""

    def number(name: str, kind: Any = int) -> Any:
        raw = (params.get(name) or "").strip()
        if not raw:
            return None
        try:
            return kind(raw)
        except ValueError:
            raise ConfigError(f"{name} must be a number") from None

    def text(name: str) -> str | None:
        raw = (params.get(name) or "").strip()
        return raw or None

    max_age_minutes = number("max_age_minutes", float)
    return panel.Filters(
        status=text("status"),
        task_type=text("task_type"),
        queue=text("queue"),
        biz_id=text("biz_id"),
        trace_id=text("trace_id"),
        min_id=number("min_id"),
        before_id=number("before_id"),
        max_age_seconds=None if max_age_minutes is None else 60 * max_age_minutes,
    )
