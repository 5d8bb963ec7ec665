"""The status page as a plain WSGI application over a ``drover.Inspector``."""

from __future__ import annotations

import hmac
import json
import re
import secrets
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from importlib.resources import files
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup
from werkzeug.wrappers import Request, Response

from drover._durations import Duration, to_seconds
from drover.errors import (
    DroverError,
    DuplicateJob,
    InvalidArgument,
    InvalidInsertOpts,
    InvalidTransition,
    NotFound,
    PermissionDenied,
)
from drover.inspector import Inspector, OperatorRights
from drover.job import (
    CANCELLABLE_STATES,
    PUBLISHED_STATES,
    RETRIABLE_STATES,
    WAITING_STATES,
    JobState,
)
from drover.limits import period_text
from drover.queues import check_queue_name
from drover.web.chart import CLAIM_SERIES, SERIES, TUPLE_SERIES, samples_svg, throughput_svg
from drover.web.limits import (
    LIMIT_POSTS,
    limit_action,
    limits_context,
)
from drover.web.params import (
    FLASH_ERRORS,
    FLASH_KEYS,
    MAX_LIMIT,
    STATES,
    BadFilter,
    flash_text,
    parse_filters,
    positive_id,
)
from drover.web.traces import fold_trace
from drover.web.workflow import job_links, result_text, workflow_context

__all__ = ["CSP", "StatusPage", "make_app"]

CSP = (
    "default-src 'none'; script-src 'self'; connect-src 'self'; "
    "style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
CSRF_COOKIE = "drover_csrf"
HEALTH_HISTORY = timedelta(hours=6)
"""How far back the health page's charts reach."""
# Cancel is offered on running jobs too: the worker is asked to stop (ADR 0030).
_CANCEL_BUTTON = frozenset({*(s.value for s in CANCELLABLE_STATES), JobState.RUNNING.value})
_JOB_ACTION = re.compile(r"^/jobs/([0-9]{1,19})/(retry|cancel)$")
_WORKFLOWS_PAGE = 50
"""Workflows per page of the workflows index."""
_JOB = re.compile(r"^/jobs/([0-9]{1,19})$")
_WORKFLOW = re.compile(r"^/workflows/([0-9]{1,19})$")
_MAX_ID = 2**63 - 1
_POSTS = {"/queues/pause", "/queues/resume", "/jobs/retry-dead", "/jobs/bulk", *LIMIT_POSTS}
# The only files served from /static/: the page's own script, by exact name.
STATIC = {"live.js": "text/javascript; charset=utf-8"}

StartResponse = Callable[..., Any]


class StatusPage:
    """The WSGI application ``make_app`` returns.

    Thread-safe: it holds no per-request state, and the Inspector it reads
    through is thread-safe. Every request borrows one Inspector connection at
    most for its own reads and writes.
    """

    def __init__(
        self, inspector: Inspector, *, refresh: float, read_only: bool, url_prefix: str
    ) -> None:
        self.inspector = inspector
        self.refresh = refresh
        self.read_only = read_only
        self.url_prefix = url_prefix
        # What the page's role may write, asked once (ADR 0054); forgotten when a
        # write is refused anyway, so a changed grant is asked again.
        self._rights: OperatorRights | None = None
        self._env = Environment(
            loader=PackageLoader("drover.web", "templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self._env.filters["when"] = _when
        self._env.filters["ago"] = _ago
        self._env.filters["compact_json"] = _compact_json
        self._env.filters["seconds"] = _seconds
        self._env.filters["period"] = period_text

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        # A fresh token for a client without the cookie; one with it keeps
        # its own (see _harden).
        environ.setdefault("drover.csrf", secrets.token_urlsafe(32))
        request = Request(environ)
        response = self._dispatch(request)
        self._harden(request, response)
        return response(environ, start_response)

    # --- routing --------------------------------------------------------------------------------

    def _base(self, request: Request) -> str:
        return request.script_root + self.url_prefix

    def _dispatch(self, request: Request) -> Response:
        path = request.path
        if self.url_prefix:
            if not path.startswith(self.url_prefix):
                return self._error(request, 404, "Not found", "No such page.")
            path = path[len(self.url_prefix) :] or "/"
        action = _JOB_ACTION.match(path)
        if action is not None or path in _POSTS:
            if request.method != "POST":
                response = self._error(request, 405, "Method not allowed", "Use POST.")
                response.headers["Allow"] = "POST"
                return response
            return self._mutate(request, path, action)
        if request.method not in ("GET", "HEAD"):
            response = self._error(request, 405, "Method not allowed", "Use GET.")
            response.headers["Allow"] = "GET, HEAD"
            return response
        try:
            if path == "/":
                return self._overview(request)
            if path == "/jobs":
                return self._jobs(request)
            if path == "/workers":
                return self._workers(request)
            if path == "/limits":
                return self._limits(request)
            if path == "/health":
                return self._health(request)
            if path == "/jump":
                return self._jump(request)
            if path == "/workflows":
                return self._workflows(request)
            # Singular: /queues/pause and /queues/resume are the pause buttons' routes.
            for prefix, what in (("/kind/", "kind"), ("/queue/", "queue")):
                if path.startswith(prefix) and len(path) > len(prefix):
                    return self._scope(request, what, path.removeprefix(prefix))
            if path.startswith("/static/"):
                return self._static(request, path.removeprefix("/static/"))
            job = _JOB.match(path)
            if job is not None:
                return self._job(request, int(job.group(1)))
            workflow = _WORKFLOW.match(path)
            if workflow is not None:
                return self._workflow(request, int(workflow.group(1)))
        except DroverError as exc:
            return self._error(request, 500, "The database refused", str(exc))
        return self._error(request, 404, "Not found", "No such page.")

    # --- pages ----------------------------------------------------------------------------------

    def rights(self) -> OperatorRights | None:
        """What the page's role may write (``Inspector.rights``), asked at the first need
        and kept; ``None`` with ``read_only`` (nothing is offered) or when the database
        cannot tell now (nothing is offered, and the next page asks again)."""
        if self.read_only:
            return None
        rights = self._rights
        if rights is None:
            try:
                rights = self._rights = self.inspector.rights()
            except DroverError:
                return None
        return rights

    def _render(
        self,
        request: Request,
        template: str,
        status: int = 200,
        *,
        ask: bool = True,
        **context: Any,
    ) -> Response:
        flash = flash_text(request.args)
        context.setdefault("live_seconds", None)
        # An error page does not ask (the database may be what failed): it uses what is known.
        rights = self.rights() if ask else None if self.read_only else self._rights
        body = self._env.get_template(template).render(
            base=self._base(request),
            # Each kind of button is offered only when the role may use it.
            read_only=rights is None or not rights.any,
            may_jobs=rights is not None and rights.retry_and_cancel,
            may_queues=rights is not None and rights.pause_queues,
            may_limits=rights is not None and rights.set_limits,
            role_read_only=None if self.read_only or rights is None or rights.any else rights.role,
            csrf=request.cookies.get(CSRF_COOKIE) or request.environ["drover.csrf"],
            flash=flash,
            flash_error=request.args.get("flash") in FLASH_ERRORS,
            here=(request.script_root + request.full_path).rstrip("?"),
            **context,
        )
        return Response(body, status=status, content_type="text/html; charset=utf-8")

    def _refresh_url(self, request: Request, path: str, query: str = "") -> str | None:
        # Without JavaScript: a meta refresh (inside <noscript>), only on pages
        # with nothing to type into, since a reload loses what was typed.
        if not self.refresh:
            return None
        return f"{int(self.refresh)};url={self._base(request)}{path}{'?' + query if query else ''}"

    @property
    def _live_seconds(self) -> int | None:
        # With JavaScript: live.js refreshes the [data-live] regions in place.
        return int(self.refresh) if self.refresh else None

    def _overview(self, request: Request) -> Response:
        queues = self.inspector.queues()
        points = self.inspector.throughput(60)
        workers = self.inspector.workers()
        consumers = Counter(q for w in workers for q in set(w.queues))
        waiting = [s.value for s in WAITING_STATES]
        unattended = [
            q.name for q in queues if consumers[q.name] == 0 and any(q.counts[s] for s in waiting)
        ]
        return self._render(
            request,
            "overview.html",
            title="Overview",
            queues=queues,
            states=[s.value for s in PUBLISHED_STATES],
            chart=throughput_svg(points),
            totals={name: sum(getattr(p, name) for p in points) for name, _ in SERIES},
            workers=workers,
            consumers=consumers,
            unattended=unattended,
            kinds=self.inspector.kinds(60),
            refresh_url=self._refresh_url(request, "/"),
            live_seconds=self._live_seconds,
        )

    def _workers(self, request: Request) -> Response:
        return self._render(
            request,
            "workers.html",
            title="Workers",
            workers=self.inspector.workers(),
            refresh_url=self._refresh_url(request, "/workers"),
            live_seconds=self._live_seconds,
        )

    def _scope(self, request: Request, what: str, name: str) -> Response:
        """A kind's or a queue's page: its throughput over the last hour or day, its run
        times (a kind) or its counts, workers and pause button (a queue)."""
        window = "day" if request.args.get("window") == "day" else "hour"
        minutes = 1440 if window == "day" else 60
        try:
            if what == "kind":
                points = self.inspector.throughput(minutes, kind=name)
            else:
                points = self.inspector.throughput(minutes, queue=name)
        except InvalidArgument as exc:
            return self._error(request, 400, f"Bad {what}", str(exc))
        kind = queue = None
        consumers = 0
        if what == "kind":
            kind = next((k for k in self.inspector.kinds(minutes) if k.kind == name), None)
        else:
            queue = next((q for q in self.inspector.queues() if q.name == name), None)
            consumers = sum(1 for w in self.inspector.workers() if name in w.queues)
        page = f"/{what}/{quote(name, safe='')}"
        return self._render(
            request,
            "scope.html",
            title=f"{what.capitalize()} {name}",
            what=what,
            name=name,
            window=window,
            here_path=self._base(request) + page,
            chart=throughput_svg(points),
            totals={series: sum(getattr(p, series) for p in points) for series, _ in SERIES},
            kind=kind,
            queue=queue,
            consumers=consumers,
            states=[s.value for s in PUBLISHED_STATES],
            refresh_url=self._refresh_url(request, page),
            live_seconds=self._live_seconds,
        )

    def _workflows(self, request: Request) -> Response:
        before_text = request.args.get("before", "")
        before = None
        if before_text:
            if not _digits(before_text):
                return self._error(request, 400, "Bad filter: before", "before must be a job id.")
            before = int(before_text)
        try:
            rows = self.inspector.workflows(_WORKFLOWS_PAGE, before)
        except InvalidArgument as exc:
            return self._error(request, 400, "Bad filter: before", str(exc))
        return self._render(
            request,
            "workflows.html",
            title="Workflows",
            workflows=rows,
            older=rows[-1].id if len(rows) == _WORKFLOWS_PAGE else None,
            refresh_url=self._refresh_url(request, "/workflows"),
            live_seconds=self._live_seconds,
        )

    def _health(self, request: Request) -> Response:
        # The queue doctor (ADR 0035), read-only, with the default thresholds.
        report = self.inspector.health()
        # The last hours of the samples the clients write once a minute (ADR 0060); a
        # schema behind this drover may have no such table, and the doctor says so.
        behind = {"SCHEMA_MISSING", "SCHEMA_BEHIND"} & set(report.codes())
        since = datetime.now(UTC) - HEALTH_HISTORY
        samples = [] if behind else self.inspector.health_samples(since)
        return self._render(
            request,
            "health.html",
            title="Health",
            report=report,
            samples=samples,
            history_hours=int(HEALTH_HISTORY.total_seconds() // 3600),
            tuples_chart=samples_svg(
                samples,
                TUPLE_SERIES,
                chart_id="tuples-chart",
                title="drover_jobs: dead and live tuples, per minute",
            ),
            claims_chart=samples_svg(
                samples,
                CLAIM_SERIES,
                chart_id="claims-chart",
                title="Claim time, milliseconds: p50 and p99 over the live clients, slowest walk",
                scale=1000.0,
            ),
            refresh_url=self._refresh_url(request, "/health"),
            live_seconds=self._live_seconds,
        )

    def _limits(self, request: Request) -> Response:
        return self._render(
            request,
            "limits.html",
            title="Limits",
            refresh_url=None,  # the set form would lose what was typed on a reload
            live_seconds=self._live_seconds,
            **limits_context(self.inspector, request.args),
        )

    def _static(self, request: Request, name: str) -> Response:
        content_type = STATIC.get(name)
        if content_type is None:
            return self._error(request, 404, "Not found", "No such page.")
        body = (files("drover.web") / "static" / name).read_bytes()
        return Response(body, status=200, content_type=content_type)

    def _jobs(self, request: Request) -> Response:
        try:
            filters = parse_filters(request.args)
        except BadFilter as exc:
            return self._error(request, 400, f"Bad filter: {exc.field}", str(exc))
        rows = self.inspector.list_jobs(
            queue=filters.queue,
            state=None if filters.state == "all" else filters.state,
            limit=filters.limit,
            kind=filters.kind,
            before_id=filters.before,
            args_contain=filters.args_value,
            tags=filters.tags or None,
        )
        older = filters.query(before=rows[-1].id) if len(rows) == filters.limit else None
        return self._render(
            request,
            "jobs.html",
            title="Jobs",
            rows=rows,
            filters=filters,
            states=STATES,
            older=older,
            newest=filters.query(before=None) if filters.before else None,
            retriable={s.value for s in RETRIABLE_STATES},
            cancellable=_CANCEL_BUTTON,
            refresh_url=None,  # the filters and the checkboxes would be lost on a reload
            live_seconds=self._live_seconds,
        )

    def _job(self, request: Request, job_id: int) -> Response:
        try:
            row = self.inspector.get_job(job_id)
            holder = self.inspector.lease_holder(job_id)
        except NotFound:
            return self._error(request, 404, "Not found", f"Job {job_id} does not exist.")
        return self._render(
            request,
            "job.html",
            title=f"Job {row.id}",
            row=row,
            holder=holder,
            args=json.dumps(row.args, indent=2, ensure_ascii=False, sort_keys=True),
            meta=json.dumps(row.meta, indent=2, ensure_ascii=False, sort_keys=True)
            if row.meta
            else None,
            errors=[_error_entry(e) for e in row.errors],
            result=result_text(self.inspector, row),
            links=job_links(self.inspector, row),
            retriable={s.value for s in RETRIABLE_STATES},
            cancellable=_CANCEL_BUTTON,
            refresh_url=self._refresh_url(request, f"/jobs/{row.id}"),
            live_seconds=self._live_seconds,
        )

    def _workflow(self, request: Request, job_id: int) -> Response:
        missing = f"Job {job_id} does not exist or belongs to no workflow."
        if not 1 <= job_id <= _MAX_ID:
            return self._error(request, 404, "Not found", missing)
        try:
            workflow = self.inspector.workflow(job_id)
        except NotFound:
            return self._error(request, 404, "Not found", missing)
        return self._render(
            request,
            "workflow.html",
            title=f"Workflow {workflow.id}",
            refresh_url=self._refresh_url(request, f"/workflows/{job_id}"),
            live_seconds=self._live_seconds,
            **workflow_context(workflow, self._base(request)),
        )

    def _jump(self, request: Request) -> Response:
        """The header's box: a job id (``#`` and spaces allowed) goes to that job's page."""
        text = request.args.get("id", "").strip().removeprefix("#").strip()
        if not _digits(text) or not 1 <= int(text) < 2**63:
            return self._error(
                request, 400, "Not a job id", f"{text[:40]!r} is not a job id (1 or more)."
            )
        response = Response("", status=303)
        response.headers["Location"] = f"{self._base(request)}/jobs/{int(text)}"
        return response

    def _error(self, request: Request, status: int, title: str, message: str) -> Response:
        return self._render(
            request, "error.html", status=status, ask=False, title=title, message=message
        )

    # --- mutations ------------------------------------------------------------------------------

    def _mutate(self, request: Request, path: str, action: re.Match[str] | None) -> Response:
        if self.read_only:
            return self._error(request, 403, "Read-only", "This status page is read-only.")
        if not _same_origin(request):
            return self._error(request, 403, "Refused", "Cross-origin request refused.")
        token, cookie = request.form.get("csrf", ""), request.cookies.get(CSRF_COOKIE, "")
        if not token or not cookie or not hmac.compare_digest(token, cookie):
            return self._error(request, 403, "Refused", "Missing or wrong form token; reload.")
        refused = self._refused(path)
        if refused is not None:
            return self._error(request, 403, "Not permitted", refused)
        back = _safe_next(request.form.get("next", ""), self._base(request))
        try:
            if path == "/jobs/bulk":
                return self._bulk(request, back)
            if path in LIMIT_POSTS:
                return _redirect(back, **limit_action(self.inspector, path, request.form))
            if action is not None:
                job_id, verb = int(action.group(1)), action.group(2)
                return self._job_action(back, job_id, verb, request.form.get("reason", ""))
            if path in ("/queues/pause", "/queues/resume"):
                queue = check_queue_name(request.form.get("queue", ""))
                if path == "/queues/pause":
                    self.inspector.pause_queue(queue)
                    return _redirect(back, flash="paused", queue_name=queue)
                resumed = self.inspector.resume_queue(queue)
                return _redirect(
                    back, flash="resumed" if resumed else "not_paused", queue_name=queue
                )
            kind = request.form.get("kind", "")
            queue_filter = request.form.get("queue") or None
            if request.form.get("confirm") != "yes":
                return self._confirm_retry_dead(request, back, kind, queue_filter)
            count = self.inspector.retry_dead(kind, queue_filter)
            return _redirect(back, flash="retried_dead", count=count, kind_name=kind)
        except (InvalidArgument, InvalidInsertOpts) as exc:
            return self._error(request, 400, "Bad request", str(exc))
        except PermissionDenied as exc:
            # Allowed when asked, refused now: a grant changed. Ask again next time.
            self._rights = None
            return self._error(request, 403, "Not permitted", str(exc))
        except DroverError as exc:
            return self._error(request, 500, "The database refused", str(exc))

    def _confirm_retry_dead(
        self, request: Request, back: str, kind: str, queue: str | None
    ) -> Response:
        """The step before a retry of every dead job of a kind: how many it will touch."""
        count = self.inspector.count_dead(kind, queue)
        where = f" in queue {queue}" if queue else ""
        message = (
            f"{count} dead job(s) of kind {kind}{where} would go back to the queue, each "
            "with its attempts counted from zero. Jobs that die before you confirm are "
            "retried too."
            if count
            else f"No job of kind {kind}{where} is dead now: there is nothing to retry."
        )
        return self._render(
            request,
            "confirm.html",
            title=f"Retry the dead {kind} jobs?",
            message=message,
            path="/jobs/retry-dead",
            action_label=f"Retry {count} job(s)",
            fields={"kind": kind, "queue": queue or "", "confirm": "yes"},
            back=back,
            danger=False,
            count=count,
        )

    def _refused(self, path: str) -> str | None:
        """Why the page's role may not make this write, or ``None`` when it may."""
        rights = self.rights()
        if path in LIMIT_POSTS:
            what, needs = "set or clear limits", "INSERT, UPDATE and DELETE on drover_limits"
            allowed = rights is not None and rights.set_limits
        elif path in ("/queues/pause", "/queues/resume"):
            what, needs = "pause or resume queues", "INSERT and UPDATE on drover_queues"
            allowed = rights is not None and rights.pause_queues
        else:
            what, needs = "retry or cancel jobs", "UPDATE on drover_jobs"
            allowed = rights is not None and rights.retry_and_cancel
        if allowed or rights is None:
            # Not known (the database did not answer): the write itself says what is wrong.
            return None
        return (
            f"Role {rights.role!r} may not {what} (it lacks {needs}). Serve the page as the "
            "role that owns drover's tables to offer it, or with --read-only (read_only=True) "
            "to say that it never will."
        )

    def _bulk(self, request: Request, back: str) -> Response:
        verb = request.form.get("action", "")
        if verb not in ("retry", "cancel"):
            return self._error(request, 400, "Bad request", "action must be retry or cancel.")
        try:
            ids = sorted({positive_id(v, "id") for v in request.form.getlist("id")})
        except BadFilter as exc:
            return self._error(request, 400, "Bad request", str(exc))
        if not ids:
            return _redirect(back, flash="none_selected")
        if len(ids) > MAX_LIMIT:
            return self._error(
                request, 400, "Bad request", f"select at most {MAX_LIMIT} jobs at once."
            )
        if verb == "retry":
            done = self.inspector.retry_jobs(ids)
            return _redirect(back, flash="bulk_retried", count=len(done), selected=len(ids))
        done = self.inspector.cancel_jobs(ids)
        return _redirect(back, flash="bulk_cancelled", count=len(done), selected=len(ids))

    def _job_action(self, back: str, job_id: int, verb: str, reason: str = "") -> Response:
        try:
            if verb == "retry":
                self.inspector.retry_job(job_id)
            else:
                row = self.inspector.cancel_job(job_id, reason=reason.strip() or None)
                if row.state is JobState.RUNNING:
                    return _redirect(back, flash="cancel_requested", job=job_id)
        except NotFound:
            return _redirect(back, flash="not_found", job=job_id)
        except InvalidTransition as exc:
            state = exc.state.value if isinstance(exc.state, JobState) else str(exc.state)
            return _redirect(back, flash="refused", job=job_id, state_was=state)
        except DuplicateJob:
            return _redirect(back, flash="duplicate", job=job_id)
        return _redirect(back, flash="retried" if verb == "retry" else "cancelled", job=job_id)

    # --- headers --------------------------------------------------------------------------------

    def _harden(self, request: Request, response: Response) -> None:
        headers = response.headers
        headers["Content-Security-Policy"] = CSP
        headers["X-Content-Type-Options"] = "nosniff"
        headers["Referrer-Policy"] = "same-origin"
        headers["Cache-Control"] = "no-store"
        if not request.cookies.get(CSRF_COOKIE):
            # Double-submit token: forms carry the cookie's value, which another
            # origin can neither read nor set, so any process serving this page
            # (several WSGI workers) can check it without shared state.
            response.set_cookie(
                CSRF_COOKIE,
                request.environ["drover.csrf"],
                path=self._base(request) or "/",
                httponly=True,
                samesite="Strict",
                secure=request.scheme == "https",
            )


def _same_origin(request: Request) -> bool:
    """The Origin header, else the Referer, names this host; neither present → refused."""
    source = request.headers.get("Origin") or request.headers.get("Referer")
    if not source or source == "null":
        return False
    return urlsplit(source).netloc == request.host


def _safe_next(value: str, base: str) -> str:
    # Only a path under this app: never an open redirect.
    if (
        value.startswith((base + "/", base + "?"))
        and "//" not in value[len(base) :]
        and "\\" not in value
    ):
        return value
    return base + "/"


def _digits(text: str) -> bool:
    """ASCII digits, short enough to be a job id (``int`` refuses very long ones)."""
    return 0 < len(text) <= 19 and text.isascii() and text.isdigit()


def _redirect(back: str, **flash: object) -> Response:
    path, _, query = back.partition("?")
    kept = [(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k not in FLASH_KEYS]
    target = f"{path}?{urlencode([*kept, *((k, str(v)) for k, v in flash.items())])}"
    response = Response("", status=303)
    response.headers["Location"] = target
    return response


def _when(value: datetime | None) -> str:
    """A timestamp in UTC to the second, the way the tables show them."""
    if value is None:
        return "\u2013"  # an en dash, as the templates show a missing value
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _ago(value: datetime | None, now: datetime | None = None) -> Markup:
    """A timestamp as people read it (``3 min ago``, ``in 2 h``), the UTC time on hover.

    ``now`` is this process's clock by default: close enough for reading a page.
    """
    if value is None:
        return Markup("\u2013")
    moment = value.astimezone(UTC)
    delta = ((now or datetime.now(UTC)) - moment).total_seconds()
    return Markup('<time datetime="{}" title="{} UTC">{}</time>').format(
        moment.isoformat(), moment.strftime("%Y-%m-%d %H:%M:%S"), relative(delta)
    )


def relative(seconds: float) -> str:
    """``seconds`` since a moment (negative: until it) as ``just now``, ``42 s ago``,
    ``3 min ago``, ``5 h ago``, ``2 d ago``, or ``in 3 min``."""
    past, span = seconds >= 0, abs(seconds)
    if span < 1:
        return "just now"
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60), ("s", 1)):
        if span >= size:
            text = f"{int(span // size)} {unit}"
            return f"{text} ago" if past else f"in {text}"
    raise AssertionError(span)  # pragma: no cover - span >= 1 matched "s"


def _compact_json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(", ", ": "))


def _seconds(value: float | None) -> str:
    if value is None:
        return "\u2013"
    if value < 1:
        return f"{value * 1000:.0f} ms"
    return f"{value:.2f} s" if value < 100 else f"{value:.0f} s"


def _error_entry(entry: Mapping[str, Any]) -> dict[str, Any]:
    """An ``errors`` element for the job page, its traceback split into folded segments."""
    shown = dict(entry)
    trace = entry.get("trace")
    shown["trace"] = fold_trace(trace) if isinstance(trace, str) and trace else None
    return shown


def make_app(
    inspector: Inspector,
    *,
    refresh: Duration = 5,
    read_only: bool = False,
    url_prefix: str = "",
) -> StatusPage:
    """The status page for ``inspector``'s database, as a WSGI application.

    Mount it under any path (Flask, Django, any WSGI server): links follow
    ``SCRIPT_NAME`` plus ``url_prefix``. Pages: the overview (queues with
    their counts, oldest claimable age, live consumers, pause and resume;
    queues with waiting jobs and no live worker flagged; completed, failed
    and dead per minute over the last hour as an SVG chart; per kind, the
    hour's outcomes and run-time p50/p95), the workers (every live client
    from `Inspector.workers`), the job list (filters ``queue``, ``kind``,
    ``state`` (``dead`` by default, ``all`` for any), ``args`` (a JSON object
    the args contain) and ``limit`` 1..1000, paged by id; bulk retry and
    cancel of ticked jobs), one page per job (args, every error with its
    traceback, drover's own frames folded, timestamps, the lease holder; a
    completed job's result; a workflow job's link to its workflow and the
    jobs it waits for), one page per workflow (``/workflows/<any job id>``:
    its jobs drawn as an SVG graph in dependency layers, each box coloured by
    state and linking to its job, at most 300 drawn, and a table of them) and
    the limits (each cluster-wide limit with its use now: running jobs
    against its concurrency, starts in the window against its rate,
    partitions at their limit; who set it; a form to override one and a
    button to clear an override).

    Mutations (retry, cancel, bulk retry and cancel, retry every dead job of
    a kind, pause, resume, set and clear a limit) are POST only, checked for a same-origin
    ``Origin``/``Referer`` and a double-submit form token, and go through the
    Inspector's state-conditioned writes, so they are safe against workers
    finishing the same jobs. With ``read_only`` there are no buttons and
    every mutation is 403. Without it the page asks once, at its first page,
    which writes its role may make (``Inspector.rights``, ADR 0054) and
    offers only those buttons; a write the role may not make is 403 naming
    the role and what it lacks, as is one PostgreSQL refuses anyway. Every
    response carries a strict Content-Security-Policy (no script but the
    app's own `/static/live.js`, nothing inline) and ``nosniff``; all job
    data is escaped.

    ``refresh`` (seconds or a ``timedelta``; 0 disables) is how often the
    data refreshes: with JavaScript the script replaces the tables in place,
    never the job list's filters, and holds still while jobs are ticked or a
    field in a table has focus; without it, a ``<noscript>`` meta refresh
    reloads the pages that have nothing to type into.

    There is no authentication: mount it behind your application's own, or
    serve it on loopback (the ``drover web`` default).
    """
    if not isinstance(inspector, Inspector):
        raise InvalidArgument(f"make_app needs a drover.Inspector, not {type(inspector).__name__}")
    seconds = to_seconds(refresh, "refresh")
    if seconds != 0 and seconds < 1:
        raise InvalidArgument(f"refresh must be 0 (off) or at least 1 second, not {seconds:g}")
    if not isinstance(read_only, bool):
        raise InvalidArgument(f"read_only must be True or False, not {read_only!r}")
    if not isinstance(url_prefix, str) or (url_prefix and not url_prefix.startswith("/")):
        raise InvalidArgument(f"url_prefix must be empty or start with '/', not {url_prefix!r}")
    return StatusPage(
        inspector, refresh=seconds, read_only=read_only, url_prefix=url_prefix.rstrip("/")
    )
