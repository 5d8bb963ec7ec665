"""The status page as a plain WSGI application over an :class:`drover.Inspector`."""

from __future__ import annotations

import hmac
import json
import re
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from jinja2 import Environment, PackageLoader, select_autoescape
from werkzeug.wrappers import Request, Response

from drover._durations import Duration, to_seconds
from drover.errors import (
    DroverError,
    DuplicateJob,
    InvalidArgument,
    InvalidInsertOpts,
    InvalidTransition,
    NotFound,
)
from drover.inspector import Inspector
from drover.job import (
    CANCELLABLE_STATES,
    MAX_KIND_LENGTH,
    PUBLISHED_STATES,
    RETRIABLE_STATES,
    JobState,
    _check_name,
)
from drover.queues import check_queue_name
from drover.web.chart import SERIES, throughput_svg

__all__ = ["CSP", "StatusPage", "make_app"]

CSP = (
    "default-src 'none'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
CSRF_COOKIE = "drover_csrf"
STATES = ("dead", "all", *(s.value for s in JobState if s is not JobState.DEAD))
MAX_LIMIT = 1000
_JOB_ACTION = re.compile(r"^/jobs/([0-9]{1,19})/(retry|cancel)$")
_JOB = re.compile(r"^/jobs/([0-9]{1,19})$")
_POSTS = {"/queues/pause", "/queues/resume", "/jobs/retry-dead"}

StartResponse = Callable[..., Any]


class BadFilter(Exception):
    """A query parameter the page refuses; ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True, slots=True)
class Filters:
    queue: str | None
    kind: str | None
    state: str
    limit: int
    before: int | None

    def query(self, **changes: object) -> str:
        values: dict[str, object] = {
            "queue": self.queue,
            "kind": self.kind,
            "state": self.state,
            "limit": self.limit,
            "before": self.before,
        }
        values.update(changes)
        kept = {k: v for k, v in values.items() if v not in (None, "")}
        if kept.get("state") == "dead":
            del kept["state"]
        if kept.get("limit") == 100:
            del kept["limit"]
        return urlencode(sorted(kept.items()))


def _positive_id(text: str, field: str) -> int:
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= 2**63 - 1:
        raise BadFilter(field, f"{field} must be a job id (a whole number from 1), not {text!r}")
    return int(text)


def parse_filters(args: Any) -> Filters:
    """The job list's filters from a query string, or :class:`BadFilter` naming the field."""
    queue = args.get("queue") or None
    if queue is not None:
        try:
            check_queue_name(queue)
        except InvalidInsertOpts as exc:
            raise BadFilter("queue", str(exc)) from None
    kind = args.get("kind") or None
    if kind is not None:
        try:
            _check_name(kind, "kind", MAX_KIND_LENGTH)
        except (TypeError, ValueError) as exc:
            raise BadFilter("kind", str(exc)) from None
    state = args.get("state") or "dead"
    if state not in STATES:
        raise BadFilter("state", f"unknown state {state!r}; use one of: {', '.join(STATES)}")
    raw_limit = args.get("limit") or "100"
    if not (raw_limit.isascii() and raw_limit.isdigit()) or not 1 <= int(raw_limit) <= MAX_LIMIT:
        raise BadFilter("limit", f"limit must be a whole number from 1 to {MAX_LIMIT}")
    raw_before = args.get("before") or None
    before = None if raw_before is None else _positive_id(raw_before, "before")
    return Filters(queue, kind, state, int(raw_limit), before)


FLASHES = {
    "retried": "Retried job {job}: it is available again.",
    "cancelled": "Cancelled job {job}.",
    "not_found": "Job {job} does not exist.",
    "refused": "Job {job} is {state}; that action does not apply.",
    "duplicate": "Job {job} was not retried: another job holds its unique key.",
    "paused": "Paused queue {queue}.",
    "resumed": "Resumed queue {queue}.",
    "not_paused": "Queue {queue} was not paused.",
    "retried_dead": "Retried {count} dead job(s) of kind {kind}.",
}


def flash_text(args: Any) -> str | None:
    """The message a redirect asked for, or None for an unknown or malformed one."""
    template = FLASHES.get(args.get("flash", ""))
    if template is None:
        return None
    values = {
        "job": args.get("job", ""),
        "state": args.get("state_was", ""),
        "queue": args.get("queue_name", ""),
        "count": args.get("count", ""),
        "kind": args.get("kind_name", ""),
    }
    if "{job}" in template and not (values["job"].isascii() and values["job"].isdigit()):
        return None
    if "{state}" in template and values["state"] not in {s.value for s in JobState}:
        return None
    if "{count}" in template and not values["count"].isdigit():
        return None
    return template.format(**values)  # the template escapes it when rendering


class StatusPage:
    """The WSGI application :func:`make_app` returns.

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
        self._env = Environment(
            loader=PackageLoader("drover.web", "templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
            trim_blocks=True,
            lstrip_blocks=True,
        )

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
            job = _JOB.match(path)
            if job is not None:
                return self._job(request, int(job.group(1)))
        except DroverError as exc:
            return self._error(request, 500, "The database refused", str(exc))
        return self._error(request, 404, "Not found", "No such page.")

    # --- pages ----------------------------------------------------------------------------------

    def _render(
        self, request: Request, template: str, status: int = 200, **context: Any
    ) -> Response:
        flash = flash_text(request.args)
        body = self._env.get_template(template).render(
            base=self._base(request),
            read_only=self.read_only,
            csrf=request.cookies.get(CSRF_COOKIE) or request.environ["drover.csrf"],
            flash=flash,
            flash_error=request.args.get("flash") in {"not_found", "refused", "duplicate"},
            here=(request.script_root + request.full_path).rstrip("?"),
            **context,
        )
        return Response(body, status=status, content_type="text/html; charset=utf-8")

    def _refresh_url(self, request: Request, path: str, query: str = "") -> str | None:
        if not self.refresh:
            return None
        return f"{int(self.refresh)};url={self._base(request)}{path}{'?' + query if query else ''}"

    def _overview(self, request: Request) -> Response:
        queues = self.inspector.queues()
        points = self.inspector.throughput(60)
        return self._render(
            request,
            "overview.html",
            title="drover",
            queues=queues,
            states=[s.value for s in PUBLISHED_STATES],
            chart=throughput_svg(points),
            totals={name: sum(getattr(p, name) for p in points) for name, _ in SERIES},
            refresh_url=self._refresh_url(request, "/"),
        )

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
            cancellable={s.value for s in CANCELLABLE_STATES},
            refresh_url=self._refresh_url(request, "/jobs", filters.query()),
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
            retriable={s.value for s in RETRIABLE_STATES},
            cancellable={s.value for s in CANCELLABLE_STATES},
        )

    def _error(self, request: Request, status: int, title: str, message: str) -> Response:
        return self._render(request, "error.html", status=status, title=title, message=message)

    # --- mutations ------------------------------------------------------------------------------

    def _mutate(self, request: Request, path: str, action: re.Match[str] | None) -> Response:
        if self.read_only:
            return self._error(request, 403, "Read-only", "This status page is read-only.")
        if not _same_origin(request):
            return self._error(request, 403, "Refused", "Cross-origin request refused.")
        token, cookie = request.form.get("csrf", ""), request.cookies.get(CSRF_COOKIE, "")
        if not token or not cookie or not hmac.compare_digest(token, cookie):
            return self._error(request, 403, "Refused", "Missing or wrong form token; reload.")
        back = _safe_next(request.form.get("next", ""), self._base(request))
        try:
            if action is not None:
                job_id, verb = int(action.group(1)), action.group(2)
                return self._job_action(back, job_id, verb)
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
            count = self.inspector.retry_dead(kind, queue_filter)
            return _redirect(back, flash="retried_dead", count=count, kind_name=kind)
        except (InvalidArgument, InvalidInsertOpts) as exc:
            return self._error(request, 400, "Bad request", str(exc))
        except DroverError as exc:
            return self._error(request, 500, "The database refused", str(exc))

    def _job_action(self, back: str, job_id: int, verb: str) -> Response:
        try:
            if verb == "retry":
                self.inspector.retry_job(job_id)
            else:
                self.inspector.cancel_job(job_id)
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


def _redirect(back: str, **flash: object) -> Response:
    path, _, query = back.partition("?")
    kept = [
        (k, v)
        for k, v in parse_qsl(query, keep_blank_values=True)
        if k not in {"flash", "job", "state_was", "queue_name", "count", "kind_name"}
    ]
    target = f"{path}?{urlencode([*kept, *((k, str(v)) for k, v in flash.items())])}"
    response = Response("", status=303)
    response.headers["Location"] = target
    return response


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
    their counts, oldest claimable age, pause and resume; completed, failed
    and dead per minute over the last hour as an SVG chart), the job list
    (filters ``queue``, ``kind``, ``state`` — ``dead`` by default, ``all``
    for any — and ``limit`` 1..1000, paged by id) and one page per job (args,
    every error with its traceback, timestamps, the lease holder).

    Mutations (retry, cancel, retry every dead job of a kind, pause, resume)
    are POST only, checked for a same-origin ``Origin``/``Referer`` and a
    double-submit form token, and go through the Inspector's state-conditioned
    writes, so they are safe against workers finishing the same jobs. With
    ``read_only`` there are no buttons and every mutation is 403. Every
    response carries a strict Content-Security-Policy (no scripts) and
    ``nosniff``; all job data is escaped. ``refresh`` (seconds or a
    ``timedelta``; 0 disables) reloads the overview and the list.

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
