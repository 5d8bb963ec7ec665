"""Config.plugins: the defaults, merging by name, the plugins' own checks, the deprecated fields."""

from __future__ import annotations

import warnings
from datetime import timedelta
from typing import Any

import pytest

import drover
from drover.plugins import HealthProbe, Periodic, Pruner, QueueStats


class Report(drover.JobArgs, kind="plugins_report"):
    pass


class Audit(drover.Plugin):
    """A plugin of the application's, as a user writes one."""

    name = "audit"

    def __init__(self, *, interval: drover.Duration = 30, keep: int = 10) -> None:
        super().__init__(interval=interval)
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise self.option_error("keep", f"must be a positive int, not {keep!r}")
        self.keep = keep

    def run_once(self, context: drover.PluginContext) -> None:
        return None


def _nightly() -> drover.PeriodicJob:
    return drover.PeriodicJob("nightly", "30 2 * * *", Report())


def _names(config: drover.Config) -> list[str]:
    return [p.name for p in config.effective_plugins]


# --- the defaults and merging by name ------------------------------------------------------------


def test_the_defaults_are_todays_services_with_todays_options() -> None:
    config = drover.Config()
    assert config.plugins == ()
    assert config.effective_plugins == (QueueStats(), Pruner(), HealthProbe())
    assert _names(config) == ["refresher", "pruner", "health"]
    stats, pruner, health = config.effective_plugins
    assert stats.interval == timedelta(seconds=15)
    assert isinstance(pruner, Pruner)
    assert pruner.retention == drover.Retention()
    assert pruner.interval == timedelta(seconds=60)
    assert isinstance(health, HealthProbe)
    assert health.interval == timedelta(seconds=60)
    assert health.thresholds == drover.HealthThresholds()
    assert config.plugin("periodic") is None
    assert "plugins=['refresher', 'pruner', 'health']" in repr(config)


def test_adding_a_plugin_keeps_every_default() -> None:
    # What an Oban user writes when they only want cron: retention must not go away.
    config = drover.Config(plugins=[Periodic(jobs=[_nightly()]), Audit()])
    assert _names(config) == ["refresher", "pruner", "health", "periodic", "audit"]
    assert config.plugin("pruner") == Pruner()


def test_a_plugin_named_like_a_default_replaces_it_in_its_place() -> None:
    keep = drover.Retention(completed=timedelta(hours=1), dead=None)
    config = drover.Config(plugins=[Audit(), Pruner(retention=keep, interval=10)])
    assert _names(config) == ["refresher", "pruner", "health", "audit"]
    assert config.plugin("pruner") == Pruner(retention=keep, interval=10)
    assert [type(p) for p in config.plugins] == [Audit, Pruner]


def test_turning_the_defaults_off() -> None:
    config = drover.Config(plugins=[Pruner(retention=None), HealthProbe(interval=0)])
    pruner = config.plugin("pruner")
    health = config.plugin("health")
    assert isinstance(pruner, Pruner) and pruner.retention is None
    assert isinstance(health, HealthProbe) and health.interval == timedelta(0)


def test_an_application_plugin_may_replace_a_default_by_taking_its_name() -> None:
    class MyPruner(Audit):
        name = "pruner"

    config = drover.Config(plugins=[MyPruner()])
    assert _names(config) == ["refresher", "pruner", "health"]
    assert isinstance(config.plugin("pruner"), MyPruner)


def test_replace_keeps_the_plugins_and_takes_new_ones() -> None:
    config = drover.Config(plugins=[Periodic(jobs=[_nightly()])])
    again = config.replace(concurrency=3)
    assert again.plugins == config.plugins
    assert _names(again) == _names(config)
    other = config.replace(plugins=[HealthProbe(interval=5)])
    assert _names(other) == ["refresher", "pruner", "health"]
    assert other.plugin("health") == HealthProbe(interval=5)


def test_plugins_are_values() -> None:
    assert Pruner(interval=60) == Pruner(interval=timedelta(minutes=1))
    assert Pruner() != Pruner(interval=61)
    assert hash(QueueStats()) == hash(QueueStats(interval=15))
    assert repr(QueueStats()) == "QueueStats(interval=15s)"
    assert repr(Periodic()) == "Periodic(jobs=[])"
    with pytest.raises(AttributeError, match="immutable"):
        Pruner().retention = None  # type: ignore[misc]
    assert repr(Audit(interval=timedelta(minutes=2))) == "Audit(interval=120s)"


# --- what is refused ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Pruner(interval=0), "plugin 'pruner': interval must be positive, not 0s"),
        (
            lambda: Pruner(interval="60"),  # type: ignore[arg-type]
            "plugin 'pruner': interval must be a timedelta or a number of seconds, not str",
        ),
        (lambda: Pruner(interval=True), "plugin 'pruner': interval must be a timedelta"),
        (
            lambda: Pruner(interval=timedelta(days=4000)),
            "plugin 'pruner': interval must be at most 3650 days",
        ),
        (lambda: Pruner(retention=7), "plugin 'pruner': retention must be a drover.Retention"),  # type: ignore[arg-type]
        (lambda: Pruner(retension=None), "plugin 'pruner' has no option 'retension' (did you mean"),  # type: ignore[call-arg]
        (lambda: QueueStats(interval=-1), "plugin 'refresher': interval must be positive"),
        (lambda: HealthProbe(interval=-1), "plugin 'health': interval must not be negative"),
        (lambda: Periodic(jobs="nightly"), "plugin 'periodic': jobs must be a list"),  # type: ignore[arg-type]
        (lambda: Periodic(job=[]), "plugin 'periodic' has no option 'job' (did you mean 'jobs'?)"),  # type: ignore[call-arg]
        (lambda: Audit(keep=0), "plugin 'audit': keep must be a positive int, not 0"),
        (lambda: Audit(interval=0), "plugin 'audit': interval must be positive, not 0s"),
        (lambda: Audit(kept=3), "plugin 'audit' has no option 'kept' (did you mean 'keep'?)"),  # type: ignore[call-arg]
    ],
)
def test_a_bad_option_is_refused_when_the_plugin_is_built(build: Any, message: str) -> None:
    with pytest.raises(drover.ConfigError) as raised:
        build()
    assert message in str(raised.value)
    assert isinstance(raised.value, drover.InvalidArgument)


def test_two_plugins_of_one_name_are_refused() -> None:
    with pytest.raises(drover.ConfigError) as raised:
        drover.Config(plugins=[Pruner(), Audit(), Pruner(interval=5)])
    assert str(raised.value) == (
        "Config.plugins[2] and Config.plugins[0] are both named 'pruner'; give each plugin once"
    )


@pytest.mark.parametrize(
    ("plugins", "message"),
    [
        (Pruner(), "Config.plugins must be a list of drover.Plugin, not Pruner"),
        ("pruner", "Config.plugins must be a list of drover.Plugin, not str"),
        ([Pruner], "Config.plugins[0] must be a drover.Plugin, not <class"),
        ([object()], "Config.plugins[0] must be a drover.Plugin"),
    ],
)
def test_plugins_must_be_a_list_of_built_plugins(plugins: Any, message: str) -> None:
    with pytest.raises(drover.ConfigError) as raised:
        drover.Config(plugins=plugins)
    assert message in str(raised.value)


def test_an_application_plugin_is_checked_when_built() -> None:
    class Nameless(drover.Plugin):
        def run_once(self, context: drover.PluginContext) -> None:
            return None

    class Fetcher(Nameless):
        name = "fetcher"

    class Shouting(Nameless):
        name = "Audit Log"

    class Lazy(drover.Plugin):
        name = "lazy"

    class Forgetful(drover.Plugin):
        name = "forgetful"

        def __init__(self) -> None:
            pass

        def run_once(self, context: drover.PluginContext) -> None:
            return None

    with pytest.raises(drover.ConfigError, match="needs a class attribute name"):
        Nameless(interval=1)
    with pytest.raises(drover.ConfigError, match="one of drover's own services"):
        Fetcher(interval=1)
    with pytest.raises(drover.ConfigError, match="needs a class attribute name"):
        Shouting(interval=1)
    with pytest.raises(drover.ConfigError, match="plugin 'lazy' defines no run_once"):
        drover.Config(plugins=[Lazy(interval=1)])
    with pytest.raises(drover.ConfigError, match=r"must call super\(\).__init__\(interval=...\)"):
        drover.Config(plugins=[Forgetful()])


def test_drovers_own_plugins_cannot_be_subclassed() -> None:
    with pytest.raises(TypeError, match="cannot be subclassed; write a drover.Plugin named"):

        class Mine(Pruner):  # type: ignore[misc]
            pass


# --- the deprecated fields ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "plugin", "replacement"),
    [
        ({"retention": None}, Pruner(retention=None), "Pruner(retention=...)"),
        ({"prune_interval": 5}, Pruner(interval=5), "Pruner(interval=...)"),
        ({"stats_interval": 2}, QueueStats(interval=2), "QueueStats(interval=...)"),
        ({"health_interval": 0}, HealthProbe(interval=0), "HealthProbe(interval=...)"),
        (
            {"health_thresholds": drover.HealthThresholds(xmin_age=1)},
            HealthProbe(thresholds=drover.HealthThresholds(xmin_age=1)),
            "HealthProbe(thresholds=...)",
        ),
        ({"periodic_jobs": [_nightly()]}, None, "Periodic(jobs=[...])"),
    ],
)
def test_each_deprecated_field_warns_at_the_caller_and_maps_onto_its_plugin(
    fields: dict[str, Any], plugin: drover.Plugin | None, replacement: str
) -> None:
    (name,) = fields
    with pytest.warns(DeprecationWarning, match=f"Config.{name} is deprecated") as caught:
        config = drover.Config(**fields)
    (warning,) = caught
    assert str(warning.message) == (
        f"Config.{name} is deprecated: use Config(plugins=[drover.plugins.{replacement}])"
    )
    assert warning.filename == __file__, "the warning points at the line building the Config"
    if plugin is not None:
        assert plugin in config.effective_plugins
    else:
        periodic = config.plugin("periodic")
        assert isinstance(periodic, Periodic) and [j.id for j in periodic.jobs] == ["nightly"]
    assert config.plugins == (), "what was given is kept apart from the plugins"


def test_the_two_pruner_fields_make_one_pruner() -> None:
    keep = drover.Retention(completed=60)
    with pytest.warns(DeprecationWarning, match="is deprecated: use") as caught:
        config = drover.Config(retention=keep, prune_interval=7)
    assert len(caught) == 2
    assert config.plugin("pruner") == Pruner(retention=keep, interval=7)
    assert _names(config) == ["refresher", "pruner", "health"]


def test_reading_a_deprecated_field_warns_and_answers_from_the_plugins() -> None:
    config = drover.Config(plugins=[Pruner(interval=5), Periodic(jobs=[_nightly()])])
    with pytest.warns(DeprecationWarning, match=r"read Config.plugin\('pruner'\).interval"):
        assert config.prune_interval == timedelta(seconds=5)
    with pytest.warns(DeprecationWarning, match="Config.retention is deprecated"):
        assert config.retention == drover.Retention()
    with pytest.warns(DeprecationWarning, match="Config.stats_interval is deprecated"):
        assert config.stats_interval == timedelta(seconds=15)
    with pytest.warns(DeprecationWarning, match="Config.health_interval is deprecated"):
        assert config.health_interval == timedelta(seconds=60)
    with pytest.warns(DeprecationWarning, match="Config.periodic_jobs is deprecated"):
        assert [j.id for j in config.periodic_jobs] == ["nightly"]
    off = drover.Config(plugins=[Pruner(retention=None), HealthProbe(interval=0)])
    with pytest.warns(DeprecationWarning, match="Config.retention is deprecated"):
        assert off.retention is None
    with pytest.warns(DeprecationWarning, match="Config.health_interval is deprecated"):
        assert off.health_interval == timedelta(0)


def test_a_deprecated_field_and_its_plugin_together_are_refused() -> None:
    with (
        pytest.warns(DeprecationWarning, match="Config.prune_interval"),
        pytest.raises(drover.ConfigError) as raised,
    ):
        drover.Config(prune_interval=5, plugins=[Pruner()])
    assert str(raised.value) == (
        "Config.prune_interval (deprecated) and the plugin 'pruner' in Config.plugins both "
        "configure it; drop Config.prune_interval and set it on the plugin"
    )
    with (
        pytest.warns(DeprecationWarning, match="Config.periodic_jobs"),
        pytest.raises(drover.ConfigError, match="Config.periodic_jobs .deprecated. and the plugin"),
    ):
        drover.Config(periodic_jobs=[_nightly()], plugins=[Periodic()])


def test_replace_warns_for_a_deprecated_change_only() -> None:
    with pytest.warns(DeprecationWarning, match="Config.retention"):
        config = drover.Config(retention=None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = config.replace(concurrency=3)  # carried over: no second warning
    pruner = again.plugin("pruner")
    assert isinstance(pruner, Pruner) and pruner.retention is None
    with pytest.warns(DeprecationWarning, match="Config.retention") as caught:
        changed = config.replace(retention=drover.Retention(dead=None))
    assert [w.filename for w in caught] == [__file__]
    pruner = changed.plugin("pruner")
    assert isinstance(pruner, Pruner) and pruner.retention == drover.Retention(dead=None)
    # Moving to the new form on a copy: the carried field conflicts, by design.
    with pytest.raises(drover.ConfigError, match="both configure it"):
        config.replace(plugins=[Pruner()])


def test_a_misspelt_field_suggests_the_right_one() -> None:
    with pytest.raises(drover.ConfigError) as raised:
        drover.Config(plugin=[Pruner()])  # type: ignore[call-arg]
    assert str(raised.value) == "unknown Config field(s): plugin (did you mean 'plugins'?)"
