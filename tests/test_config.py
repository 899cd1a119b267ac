"""benchmark.config's session: jobs that share their defaults overrides share one Hydra
composition and get their value overrides applied as Hydra applies them. Each job must equal a
composition of the whole job by Hydra's compose API, and fail where that one fails."""

from __future__ import annotations

import pytest
from hydra import compose as hydra_compose
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from benchmark.config import CONF, is_defaults_override, options, session, sweep_jobs


def _whole(job: list[str]):
    return hydra_compose("config", overrides=list(job))


def _same(shared, whole) -> None:
    assert OmegaConf.to_container(shared) == OmegaConf.to_container(whole)
    assert OmegaConf.is_struct(shared) and OmegaConf.is_struct(whole)


def test_defaults_overrides_are_told_from_value_overrides():
    defaults = ["env=fourrooms", "+experiment=gates", "hydra/launcher=slurm", "~slm",
                "env@x=doorkey8", "hydra.launcher.partition=gpu", "policy=ppo_lstm"]  # fmt: skip
    values = ["gate.tau=0.5", "++gate.tau=auto", "+gate.extra=1", "seed=3", "~eval.n_episodes",
              "policy.seed=1", "experiment_name=x"]  # fmt: skip
    assert all(is_defaults_override(o, CONF) for o in defaults)
    assert not any(is_defaults_override(o, CONF) for o in values)


# sweeps whose jobs vary in values, in groups and in both, with +/++ forms and a hydra override
SWEEPS = [
    ["+experiment=gates", "env=higherlower", "slm=oracle"],  # ++gate.tau over 11 values x gates
    ["+experiment=released_tau_grid"],
    ["+experiment=table1", "hydra/launcher=slurm", "policy.seed=0,1"],
    [
        "gate=entropy",
        "env=fourrooms,doorkey8",
        "gate.tau=0.1,0.3",
        "+eval.extra_key=1",
        "eval.n_episodes=3",
    ],
]


def _check_sweep(sweep: list[str], n_jobs: int) -> None:
    _, jobs = sweep_jobs(sweep)
    jobs = jobs[:n_jobs]
    with session() as compose:
        shared = [compose(job) for job in jobs]  # in order: later jobs reuse earlier compositions
        for job, cfg in zip(jobs, shared, strict=True):
            _same(cfg, _whole(job))


@pytest.mark.parametrize("sweep", SWEEPS, ids=lambda s: s[0])
def test_shared_compositions_equal_whole_ones(sweep):
    _check_sweep(sweep, 12)


@pytest.mark.slow
@pytest.mark.parametrize("preset", options("experiment"))
def test_every_presets_first_jobs_equal_whole_compositions(preset):
    _check_sweep([f"+experiment={preset}"], 6)


def test_a_job_never_sees_another_jobs_values():
    with session() as compose:
        first = compose(["gate=entropy", "gate.tau=0.1", "+eval.extra_key=1"])
        second = compose(["gate=entropy", "gate.tau=0.7"])
        first.gate.tau = 99.0  # a caller editing its config changes no other job's
        third = compose(["gate=entropy"])
        assert second.gate.tau == 0.7 and "extra_key" not in second.eval
        _same(third, _whole(["gate=entropy"]))


@pytest.mark.parametrize(
    "job",
    [
        ["env=fourrooms", "gate.tua=0.5"],  # no such key
        ["env=fourrooms", "+eval.n_episodes=3"],  # + on a key that exists
        ["env=fourrooms", "~eval.no_such_key"],  # deleting what is not there
        ["env=fourrooms", "eval.n_episodes=1,2"],  # a sweep in a job
    ],
)
def test_a_bad_value_override_fails_as_a_whole_composition_fails(job):
    with session() as compose:
        with pytest.raises(Exception) as whole:
            _whole(job)
        compose(["env=fourrooms"])  # the defaults composition is cached: only the value fails
        with pytest.raises(Exception) as shared:
            compose(job)
    assert type(shared.value) is type(whole.value)
    assert isinstance(shared.value, ConfigCompositionException) == isinstance(
        whole.value, ConfigCompositionException
    )
    assert str(shared.value).splitlines()[:1] == str(whole.value).splitlines()[:1]


def test_cfg_job_resolve_works_for_every_method_env_and_preset() -> None:
    """`python -m benchmark ... --cfg job --resolve` resolves the composed config in place
    (OmegaConf.resolve): an interpolation whose value is a list literal (an oc.select default)
    made it fail for every method but the default. Every method, every env (under method=ask,
    the one that failed) and the first job of every experiment preset; composition only."""
    firsts = {x: sweep_jobs([f"+experiment={x}"])[1][0] for x in options("experiment")}
    cases = [[f"method={m}"] for m in options("method")]
    cases += [["method=ask", f"env={e}"] for e in options("env")]
    cases += list(firsts.values())
    failed = []
    with session(CONF) as composer:
        for overrides in cases:
            cfg = composer(overrides)
            try:
                OmegaConf.resolve(cfg)
            except Exception as exc:  # noqa: BLE001 - collected: every case is reported
                failed.append(f"{' '.join(overrides)}: {type(exc).__name__}: {exc}")
    assert not failed, "\n".join(failed)
    assert len(cases) >= 50
