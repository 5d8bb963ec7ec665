"""Your handlers under faults: ``drover faults --app`` (ADR 0039).

``.worker`` is the worker process (your ``drover.Workers``, each execution
recorded by a middleware); ``.sample`` turns your args factory or a real
database's rows into the jobs of the run, and your effect checks into
callables; ``.run`` is the orchestrator (the harness's cluster, proxy, fleet
and nemesis); ``.report`` the per-kind verdict.
"""

from __future__ import annotations

from drover.faults.app.report import AppReport, KindReport
from drover.faults.app.run import AppRunFailed, AppScenario, run_app
from drover.faults.app.sample import EffectCheck, SampledJob
from drover.faults.app.worker import DATABASE_URL_ENV

__all__ = [
    "DATABASE_URL_ENV",
    "AppReport",
    "AppRunFailed",
    "AppScenario",
    "EffectCheck",
    "KindReport",
    "SampledJob",
    "run_app",
]
