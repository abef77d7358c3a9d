"""The one registry pattern for plug-ins (issue 18): harness.registry.Registry, and the gate, tuner,
engine adapter and measuring backend registries built on it."""

from __future__ import annotations

import sys
import typing
from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.registry import Registry, RegistryError

GROUP = "autotunebench.test_registry"


def _install(site: Path, module: str, body: str, group: str, entries: dict[str, str]) -> None:
    """A fake installed distribution on ``site`` with entry points ``name = value`` in ``group``."""
    (site / f"{module}.py").write_text(body)
    info = site / f"{module}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
    lines = "".join(f"{name} = {value}\n" for name, value in entries.items())
    (info / "entry_points.txt").write_text(f"[{group}]\n{lines}")


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> typing.Iterator[Path]:
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    before = set(sys.modules)
    yield root
    for name in set(sys.modules) - before:
        if name.startswith("regplug_"):
            sys.modules.pop(name, None)


# ---------------------------------------------------------------------- the generic registry

def test_register_by_decorator_and_look_up_by_name() -> None:
    reg: Registry[typing.Callable[[], int]] = Registry("widget")

    @reg.register("one")
    def one() -> int:
        return 1

    reg.add("two", lambda: 2)
    assert one() == 1                               # the decorator returns what it decorates
    assert reg.get("one") is one and reg.get("two")() == 2
    assert reg.names() == ["one", "two"] and list(reg) == ["one", "two"] and len(reg) == 2
    assert "one" in reg and "three" not in reg and reg.registered("three") is None
    assert [n for n, _ in reg.items()] == ["one", "two"]


def test_a_duplicate_name_is_refused_and_the_first_stays() -> None:
    reg: Registry[int] = Registry("widget")
    reg.add("a", 1)
    with pytest.raises(RegistryError, match="'a' is already taken"):
        reg.add("a", 2)

    with pytest.raises(RegistryError, match="already taken"):
        @reg.register("a")
        def again() -> None: ...

    assert reg.get("a") == 1
    for bad in ("", " a", "b "):
        with pytest.raises(RegistryError, match="non-empty name"):
            reg.add(bad, 3)


def test_an_unknown_name_lists_the_known_ones_and_is_user_fixable() -> None:
    reg: Registry[int] = Registry("widget", hint="Write widget:NAME.")
    for name in ("zeta", "alpha", "mid"):
        reg.add(name, 0)
    with pytest.raises(RegistryError) as info:
        reg.get("nope")
    assert str(info.value) == "unknown widget 'nope'; known widgets: alpha, mid, zeta. Write widget:NAME."
    assert isinstance(info.value, HarnessError) and getattr(info.value, "user_fixable") is True
    from atb_agent.cli._common import EXIT_BAD_INPUT, classify

    assert classify(info.value)[0] == EXIT_BAD_INPUT
    with pytest.raises(RegistryError, match="known widgets: alpha"):
        reg.require("nope")
    with pytest.raises(RegistryError, match="known widgets: none"):
        Registry[int]("widget").get("x")


def test_a_registry_raises_its_own_kind_of_error() -> None:
    class WidgetError(HarnessError):
        pass

    reg: Registry[int] = Registry("widget", error=WidgetError)
    with pytest.raises(WidgetError):
        reg.get("x")

    class NotFixable(Exception):
        pass

    with pytest.raises(TypeError, match="user_fixable"):
        Registry("widget", error=NotFixable)
    with pytest.raises(TypeError, match="from_entry_point"):
        Registry("widget", entry_point_group=GROUP)


def _ints(ep: typing.Any, obj: object) -> int:
    if not isinstance(obj, int):
        raise RegistryError(f"entry point {ep.name!r} is not an int")
    return obj


def test_entry_points_are_found_by_name_and_loaded_only_when_asked(site: Path) -> None:
    _install(site, "regplug_a", "VALUE = 7\nOTHER = 8\n", GROUP,
             {"seven": "regplug_a:VALUE", "eight": "regplug_a:OTHER", "broken": "regplug_missing:X"})
    reg: Registry[int] = Registry("widget", entry_point_group=GROUP, from_entry_point=_ints)
    reg.add("builtin", 1)
    assert reg.names()[0] == "builtin" and set(reg.names()) == {"builtin", "seven", "eight", "broken"}
    assert "seven" in reg and "regplug_a" not in sys.modules     # listed, not imported
    assert reg.get("seven") == 7 and reg.get("builtin") == 1
    with pytest.raises(RegistryError, match="'broken'.*does not load.*ModuleNotFoundError"):
        reg.get("broken")
    with pytest.raises(RegistryError, match=f"more can be installed as entry points in group '{GROUP}'"):
        reg.get("nine")


def test_an_entry_point_cannot_take_a_registered_name(site: Path) -> None:
    _install(site, "regplug_b", "VALUE = 7\n", GROUP, {"builtin": "regplug_b:VALUE"})
    reg: Registry[int] = Registry("widget", entry_point_group=GROUP, from_entry_point=_ints)
    reg.add("builtin", 1)
    assert reg.get("builtin") == 1                              # a hit never reads entry points
    with pytest.raises(RegistryError, match="reuses the widget name 'builtin'"):
        reg.get("other")
    with pytest.raises(RegistryError, match="reuses"):
        reg.names()


def test_a_plugin_named_by_itself_is_registered_under_that_name(site: Path) -> None:
    _install(site, "regplug_c", "class W:\n    name = 'w1'\nW1 = W()\n", GROUP, {"any-ep-name": "regplug_c:W1"})
    reg: Registry[typing.Any] = Registry("widget", entry_point_group=GROUP, from_entry_point=lambda ep, o: o,
                                         named_by=lambda o: o.name)
    assert reg.names() == ["w1"] and reg.get("w1").name == "w1"
    reg2: Registry[typing.Any] = Registry("widget", entry_point_group=GROUP, from_entry_point=lambda ep, o: o,
                                          named_by=lambda o: o.name)
    reg2.add("w1", object())
    with pytest.raises(RegistryError, match="reuses the widget name 'w1'"):
        reg2.values()


# ---------------------------------------------------------------------- the plug-in kinds

def test_the_gate_registry_lists_the_builtins_in_their_fail_closed_order() -> None:
    from harness.verdict.gates import BUILTIN_GATES, GATES, GateRegistryError, gate_names, registered_gates

    builtin = [g.name for g in BUILTIN_GATES]
    assert builtin == ["anomaly", "identity_aliasing", "input_mutation", "stale_output", "timed_region_escape",
                       "timer_tampering", "baseline_sabotage", "reference_scavenging", "physical_limit",
                       "forbidden_shortcut", "precision_downgrade"]
    assert GATES.names()[:len(builtin)] == builtin
    assert gate_names()[:len(builtin)] == builtin and list(registered_gates()[:len(builtin)]) == list(BUILTIN_GATES)
    assert all(GATES.get(g.name) is g for g in BUILTIN_GATES)
    with pytest.raises(GateRegistryError, match="already taken"):
        GATES.add("anomaly", BUILTIN_GATES[1])
    with pytest.raises(GateRegistryError, match="unknown gate 'nope'; known gates: anomaly"):
        GATES.get("nope")


ENGINE_NAMES = ["engine_launch", "engine_alive", "failed_requests", "baseline_requests", "output_match",
                "output_length", "anomaly"]


def test_the_engine_gates_are_gates_of_the_one_registry_keyed_by_kind() -> None:
    from harness.verdict.gates import GATES, gate_names, registered_gates
    from harness.verdict.gates.engine import ENGINE_GATES

    assert gate_names("engine") == ENGINE_NAMES and registered_gates("engine") == ENGINE_GATES
    assert all(GATES.get(f"engine:{g.name}") is g for g in ENGINE_GATES)
    assert not set(registered_gates()) & set(registered_gates("engine"))  # the kernel anomaly gate is another


def test_a_plugin_gate_runs_after_the_builtins_and_cannot_reuse_a_name(site: Path) -> None:
    from harness.verdict.gates import BUILTIN_GATES, GATES, GateRegistryError, registered_gates

    body = ("from harness.verdict.gates import gate\n"
            "@gate('extra_check')\ndef extra(evidence, protocol):\n    return [], 'ok'\n"
            "@gate('anomaly')\ndef clash(evidence, protocol):\n    return [], 'ok'\n"
            "NOT_A_GATE = 3\n")
    _install(site, "regplug_gate", body, "autotunebench.gates", {"extra": "regplug_gate:extra"})
    assert GATES.names() == [*(g.name for g in BUILTIN_GATES), *(f"engine:{n}" for n in ENGINE_NAMES), "extra_check"]
    assert GATES.values()[-1].name == "extra_check"
    assert registered_gates.__wrapped__()[-1].name == "extra_check"  # a plug-in judges kernels
    assert "extra_check" not in [g.name for g in registered_gates.__wrapped__("engine")]

    _install(site, "regplug_gate2", "", "autotunebench.gates", {"clash": "regplug_gate:clash"})
    with pytest.raises(GateRegistryError, match="reuses the gate name 'anomaly'"):
        GATES.values()


def test_a_plugin_gate_that_is_not_a_gate_is_refused(site: Path) -> None:
    from harness.verdict.gates import GATES, GateRegistryError

    _install(site, "regplug_gate3", "NOT_A_GATE = 3\n", "autotunebench.gates", {"bad": "regplug_gate3:NOT_A_GATE"})
    with pytest.raises(GateRegistryError, match="'bad' in autotunebench.gates is not a Gate"):
        GATES.values()


def test_the_tuner_registry_lists_the_builtins() -> None:
    from atb_agent.errors import TunerSpecError
    from atb_agent.tuners import BUILTIN_TUNERS, TUNERS, parse_spec

    assert TUNERS.names()[:4] == list(BUILTIN_TUNERS) == ["openai", "anthropic", "replay", "random"]
    assert TUNERS.get("openai").needs == "MODEL" and TUNERS.get("replay").needs == "PATH"
    assert TUNERS.get("random").build is None and TUNERS.get("replay").build is None
    with pytest.raises(TunerSpecError, match="unknown tuner 'nope'; known tuners: anthropic, openai, random, replay"):
        TUNERS.get("nope")
    with pytest.raises(TunerSpecError, match="already taken"):
        TUNERS.add("random", TUNERS.get("openai"))
    with pytest.raises(TunerSpecError, match="takes no argument"):
        parse_spec("random:x")


def test_a_tuner_entry_point_is_listed_without_being_imported(site: Path) -> None:
    from atb_agent.cli._args import tuner_spec
    from atb_agent.tuners import TUNERS

    _install(site, "regplug_tuner", "raise RuntimeError('imported')\n", "autotunebench.tuners",
             {"regtuner": "regplug_tuner:make"})
    assert "regtuner" in TUNERS.names() and tuner_spec("regtuner:v1") == "regtuner:v1"
    assert "regplug_tuner" not in sys.modules


def test_the_engine_registry_lists_the_builtins() -> None:
    from harness.engines import ENGINES, EngineTaskError, engine_names, get_adapter
    from harness.engines.task import EngineName

    assert engine_names() == ["llama-server", "llama-server-cuda", "sglang", "vllm"] == sorted(typing.get_args(EngineName))
    for name, cls in ENGINES.items():
        assert cls.name == name and get_adapter(name).name == name
    with pytest.raises(EngineTaskError, match="unknown engine 'x'; known engines: llama-server, llama-server-cuda, sglang, vllm"):
        get_adapter("x")


def test_the_backend_registry_lists_the_builtins() -> None:
    from harness.errors import DeviceUnavailableError
    from harness.measure.backends import BACKENDS
    from harness.measure.device import available
    from harness.records import DeviceFamily

    # A test module may register a plug-in of its own (tests/test_backend_plugin.py registers "fake" at
    # import, for its measuring children); in one pytest worker it then sits beside the built-ins.
    builtins = [n for n in BACKENDS.names() if type(BACKENDS.get(n)).__module__.startswith("harness.")]
    assert builtins == ["cpu", "cuda", "mlx"] == list(typing.get_args(DeviceFamily))
    assert BACKENDS.names()[:3] == builtins
    assert [BACKENDS.get(n).stored_as for n in builtins] == ["cpu", "cuda", "mlx"]
    assert available("cpu") == (True, "")
    assert available("mlx")[0] is False
    with pytest.raises(DeviceUnavailableError, match="unknown backend 'tpu'; known backends: cpu, cuda, (fake, )?mlx"):
        available("tpu")  # type: ignore[arg-type]
