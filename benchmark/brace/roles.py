"""Agent-BRACE's two models: a belief model b(t+1) = f(G, b(t), o(t+1)) and a policy
model pi(G, b(t+1), o(t+1)), both from the same base, as ONE consultant of a cell
(conf/slm/brace_roles.yaml). The belief prompts mark their update round `Query.role="belief"`;
those queries go to the belief model, every other one to the policy model. The other option, one
model with two prompts, is any single consultant with prompt=belief / prompt=brace.

Each role is a backend config of its own (tiny, hf, a fine-tuned one...), without its location:
where a role's weights lie is in `path.<role>` (null keys of a role are left out, so
conf/slm/brace_trained.yaml can turn brace_roles' tiny bases into hf backends) (never part of a cell's identity, like every
backend's `path`). The consultant's weights identity names both roles' weights identities, so a
cell differs when either model's weights differ, and the response cache keeps their answers
apart."""

from __future__ import annotations

from typing import Any

from benchmark.consultants import Answer, Consultant, ConsultantError, Query
from benchmark.prompts.belief import BELIEF_ROLE

ROLES = ("belief", "policy")


def role_configs(belief: Any, policy: Any, path: Any = None) -> dict[str, dict[str, Any]]:
    """Each role's backend config with its location (`path.<role>`) put back as its `path`."""
    from omegaconf import OmegaConf

    def plain(x: Any) -> Any:
        return OmegaConf.to_container(x, resolve=True) if OmegaConf.is_config(x) else x

    where = plain(path) or {}
    if not isinstance(where, dict) or set(where) - set(ROLES):
        raise ConsultantError(
            f"slm.backend.path of the two-model consultant maps roles {list(ROLES)} to their "
            f"weights' location, got {where!r}"
        )
    out = {}
    for role, cfg in (("belief", plain(belief)), ("policy", plain(policy))):
        if not isinstance(cfg, dict) or "_target_" not in cfg:
            raise ConsultantError(
                f"slm.backend.{role} must be a backend config with a `_target_` (a conf/slm "
                f"option's backend), got {cfg!r}"
            )
        if "path" in cfg:
            raise ConsultantError(
                f"slm.backend.{role}.path: put the {role} model's location in "
                f"slm.backend.path.{role} (locations never enter a cell's identity)"
            )
        cfg = {k: v for k, v in cfg.items() if v is not None}  # null: left out (a base's keys)
        out[role] = {**cfg, **({"path": where[role]} if where.get(role) is not None else {})}
    return out


def check_trained(belief: Any, policy: Any, path: Any, trained_by: str | None,
                  error: type[Exception]) -> None:  # fmt: skip
    """A role whose model a trainer makes (`trained_by`) and whose folder is not there yet:
    `error` naming the role, its location and the command that trains it."""
    if not trained_by:
        return
    from pathlib import Path

    for role, cfg in role_configs(belief, policy, path).items():
        where = cfg.get("path")
        if where is not None and not Path(str(where)).is_dir():
            raise error(
                f"slm.backend.path.{role}={where!r}: the {role} model is not trained yet; "
                f"train it first: {trained_by}"
            )


def _target(cfg: dict[str, Any]) -> type[Consultant]:
    from hydra.utils import get_class

    return get_class(str(cfg["_target_"]))


def _args(cfg: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in cfg.items() if k != "_target_"}


class RolesConsultant(Consultant):
    """The belief model answers the belief updates, the policy model the rest."""

    uses_digests = True  # make_consultant passes the results store's digest cache
    # the command that trains the roles' models (conf/slm/brace_trained.yaml) changes no answer
    execution_keys = ("trained_by",)

    def __init__(self, belief: Any, policy: Any, path: Any = None, digests: str | None = None,
                 trained_by: str | None = None):  # fmt: skip
        """`trained_by`: the command that makes the roles' models (conf/slm/brace_trained.yaml):
        while a folder is missing, the cell's identity is "not built yet" (the plan) and
        building the consultant fails naming that command."""
        from hydra.utils import instantiate

        check_trained(belief, policy, path, trained_by, ConsultantError)
        self.roles: dict[str, Consultant] = {}
        for role, cfg in role_configs(belief, policy, path).items():
            extra = (
                {"digests": digests} if digests and getattr(_target(cfg), "uses_digests", 0) else {}
            )
            self.roles[role] = instantiate(cfg, _convert_="all", **extra)
        self.needs_expert = any(c.needs_expert for c in self.roles.values())

    @property
    def identity(self) -> str:
        return "roles(" + ",".join(f"{r}={c.identity}" for r, c in self.roles.items()) + ")"

    def answer(self, queries: list[Query]) -> list[Answer]:
        out: list[Answer | None] = [None] * len(queries)
        for role, consultant in self.roles.items():
            mine = [
                i for i, q in enumerate(queries) if (q.role == BELIEF_ROLE) == (role == "belief")
            ]
            if mine:
                for i, a in zip(mine, consultant.answer([queries[i] for i in mine]), strict=True):
                    out[i] = a
        return out  # type: ignore[return-value]

    def close(self) -> None:
        for c in self.roles.values():
            c.close()

    @classmethod
    def weights_identity(
        cls,
        belief: Any,
        policy: Any,
        path: Any = None,
        trained_by: str | None = None,
        **extra: object,
    ) -> str | None:
        """Both roles' weights identities (`ModelNotBuilt` while either is not made)."""
        from benchmark.consultants import ModelNotBuilt

        check_trained(belief, policy, path, trained_by, ModelNotBuilt)
        extra = {k: v for k, v in extra.items() if not k.startswith("_")}  # hydra's keys
        ids = {
            role: _target(cfg).weights_identity(**_args(cfg), **extra)
            for role, cfg in role_configs(belief, policy, path).items()
        }
        return "roles(" + ",".join(f"{r}={i}" for r, i in ids.items()) + ")"

    @classmethod
    def make_weights(cls, belief: Any, policy: Any, path: Any = None, **_: object) -> None:
        for cfg in role_configs(belief, policy, path).values():
            _target(cfg).make_weights(**_args(cfg))
