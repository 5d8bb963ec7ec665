"""Tracebacks on the job page: drover's own frames folded, the user's shown, nothing lost."""

from __future__ import annotations

import threading

from jobdb import MakeClient, Poll

import drover
from drover.web.traces import fold_trace, is_drover_frame


class Explode(drover.JobArgs, kind="traces_explode", max_attempts=1):
    """A job whose handler raises."""


def _explode_here() -> None:
    raise ValueError("the user's own failure")


def test_a_real_failures_trace_folds_drovers_frames_and_keeps_the_users(
    make_client: MakeClient, poll: Poll
) -> None:
    ran = threading.Event()
    workers = drover.Workers()

    @workers.register(args=Explode)
    def explode(job: drover.Job[Explode]) -> None:
        ran.set()
        _explode_here()

    client = make_client(workers=workers, poll_interval=0.05)
    client.start()
    job = client.insert(Explode())
    assert ran.wait(10)
    row = poll(lambda: (r := client.get_job(job.id)).state is drover.JobState.DEAD and r)
    client.stop(timeout=5)
    trace = row.errors[-1]["trace"]
    segments = fold_trace(trace)
    assert "\n".join(s.text for s in segments) == trace  # nothing dropped or reordered
    folded = "\n".join(s.text for s in segments if s.folded)
    shown = "\n".join(s.text for s in segments if not s.folded)
    assert "_runtime" in folded and "test_traces.py" not in folded
    assert "in explode" in shown and "in _explode_here" in shown
    assert shown.startswith("Traceback (most recent call last):")
    assert shown.endswith("ValueError: the user's own failure")
    assert sum(s.frames for s in segments) == folded.count('  File "')


def test_only_drovers_own_modules_count_as_its_frames() -> None:
    assert is_drover_frame("/srv/venv/lib/python3.12/site-packages/drover/_runtime/runner.py")
    assert is_drover_frame("/work/src/drover/middleware.py")
    assert is_drover_frame(r"C:\venv\Lib\site-packages\drover\contrib\django\runner.py")
    assert not is_drover_frame("/home/me/drover/app.py")  # a project in a folder named drover
    assert not is_drover_frame("/srv/app/jobs.py")
    assert not is_drover_frame("/srv/drover_utils/_runtime/x.py")


def test_a_trace_without_frames_or_with_odd_lines_is_kept_as_it_is() -> None:
    text = "ValueError: no traceback at all\n\nDuring handling of the above exception:"
    assert [(s.text, s.frames) for s in fold_trace(text)] == [(text, 0)]
    chained = (
        "Traceback (most recent call last):\n"
        '  File "/x/drover/worker.py", line 1, in f\n'
        "    g()\n"
        "KeyError: 1\n"
        "\n"
        "The above exception was the direct cause of the following exception:\n"
        "\n"
        "Traceback (most recent call last):\n"
        '  File "/x/drover/worker.py", line 2, in h\n'
        '  File "/x/drover/job.py", line 3, in i\n'
        '  File "/app/a.py", line 4, in j\n'
        "RuntimeError: 2"
    )
    segments = fold_trace(chained)
    assert [s.frames for s in segments] == [0, 1, 0, 2, 0]
    assert "\n".join(s.text for s in segments) == chained
