"""The pytest plugin is registered by the installed package and loaded by pytest."""

from importlib.metadata import entry_points


def test_plugin_is_registered_as_a_pytest11_entry_point():
    plugins = {ep.name: ep.value for ep in entry_points(group="pytest11")}
    assert plugins.get("streamtable") == "streamtable.testing.pytest_plugin"


def test_pytest_loaded_the_plugin_with_its_fixtures(request):
    plugin = request.config.pluginmanager.get_plugin("streamtable")
    assert plugin is not None, "pytest did not load the streamtable plugin"
    for fixture in (
        "spark_session",
        "embedded_kafka",
        "topology_driver",
        "postgres",
        "kafka_connect",
    ):
        assert callable(getattr(plugin, fixture, None)), fixture
