"""One contract test over every registered backend, gate and env family: their declarations are consistent
with their own constructors and with what the core reads (docs/consultants.md "Adding a
backend", docs/gates.md "Adding a gate"), so a declaration that names a key the class does not
take, or a protocol field that does not exist, fails here rather than in a sweep."""

from __future__ import annotations

import pytest
from hydra.utils import get_class, get_method

from benchmark import protocol
from benchmark.consultants import available_backends, backend
from benchmark.consultants.errors import ConsultantError
from benchmark.envs import available_families, get_family
from benchmark.gates import Gate, available_gates, gate_order

BACKENDS = sorted(available_backends())
GATES = sorted(available_gates())
FAMILIES = sorted(available_families())


def test_the_registries_hold_the_suites_own():
    assert {"hf", "tiny", "openai", "dice", "oracle"} <= set(BACKENDS)
    assert {"never", "always", "entropy", "epistemic", "random", "learned"} <= set(GATES)
    with pytest.raises(ConsultantError, match=r"unknown backend 'nope': available \['dice'"):
        backend("nope")


@pytest.mark.parametrize("label", BACKENDS)
def test_a_backends_declarations_name_its_own_keys(label):
    cls = backend(label)
    assert cls.label == label
    keys = cls.config_keys()
    assert set(cls.execution_keys) <= keys, "an execution key the constructor does not take"
    assert set(cls.protocol_fields) <= set(protocol.BACKEND_FIELDS)
    assert not (cls.reads_generation_config and not cls.uses_lm)


@pytest.mark.parametrize("name", GATES)
def test_a_gates_declarations_are_whole(name):
    cls = available_gates()[name]
    assert issubclass(cls, Gate) and cls.name == name
    assert set(Gate.SETTINGS) <= cls.config_keys()
    assert cls.needs_training == (cls.trainer is not None)
    if cls.trainer is not None:
        assert callable(get_method(cls.trainer))
    assert cls.min_mc_samples >= 1 and (cls.min_mc_samples == 1 or cls.min_mc_samples_why)


def test_the_report_order_is_the_declared_one():
    assert gate_order() == ("never", "always", "entropy", "epistemic", "random")
    orders = [g.report_order for g in available_gates().values() if g.report_order is not None]
    assert len(orders) == len(set(orders)), "two gates declare the same report place"


def test_every_gate_module_of_the_package_is_found_by_the_folder_scan():
    """A gate is found by its module of benchmark/gates/, not by a list: each in-tree gate's
    class lives in its own concept's module, and `benchmark.gates` still names every one."""
    import benchmark.gates as gates

    modules = {name: cls.__module__ for name, cls in available_gates().items()}
    assert modules == {
        "never": "benchmark.gates.constant",
        "always": "benchmark.gates.constant",
        "entropy": "benchmark.gates.entropy",
        "epistemic": "benchmark.gates.entropy",
        "learned": "benchmark.gates.learned",
        "random": "benchmark.gates.chance",
    }
    assert all(getattr(gates, cls.__name__) is cls for cls in available_gates().values())


@pytest.mark.parametrize("name", FAMILIES)
def test_a_familys_report_figure_and_extractors_resolve(name):
    """What the report and the policy network ask a family for names something that exists."""
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

    from benchmark.policy.network import FLAT, extractors

    family = get_family(name)
    if family.where_figure is not None:
        assert callable(get_method(family.where_figure))
    for key, target in family.extractors.items():
        assert key != FLAT and extractors()[key] == target
        assert issubclass(get_class(target), BaseFeaturesExtractor)


def test_the_figures_and_the_cnn_belong_to_their_families():
    assert get_family("grid").where_figure == "benchmark.report.analysis.grid_figure"
    assert get_family("memory").where_figure == get_family("grid").where_figure
    assert get_family("cards").where_figure == "benchmark.report.analysis.cards_figure"
    assert get_family("textworld").where_figure is None
    assert set(get_family("grid").extractors) == {"minigrid_cnn"}
    assert get_family("cards").extractors == {}
