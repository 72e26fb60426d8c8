"""The pytest plugin is registered by the installed package and provides its fixtures."""

from importlib.metadata import entry_points


def test_plugin_is_registered_as_a_pytest11_entry_point():
    plugins = {ep.name: ep.value for ep in entry_points(group="pytest11")}
    assert plugins.get("streamtable") == "streamtable.testing.pytest_plugin"


def test_plugin_fixtures_are_available(request):
    names = set(request.session._fixturemanager._arg2fixturedefs)
    assert {"spark_session", "embedded_kafka", "topology_driver"} <= names
