"""Prompt variants (ASK/ASK+, feedback-paper strategies, belief state) and action parsing.

A variant is built from conf/prompt/<name>.yaml with hydra.utils.instantiate; see base.py for the
session protocol and parse.py for the one parser every variant uses."""

from benchmark.prompts.base import (
    Consultation,
    Decision,
    PromptSession,
    PromptVariant,
    check_choice_scoring,
    prompt_keys,
)
from benchmark.prompts.parse import (
    PARSER_VERSION,
    json_field,
    parse_action,
    parse_plan,
    parse_reason,
)

# The version of the text a variant sends is its env family's (Family.prompt_version in
# benchmark/envs/family.py): bump the version of each family whose prompts a change moves.

__all__ = [
    "PARSER_VERSION",
    "Consultation",
    "Decision",
    "PromptSession",
    "PromptVariant",
    "check_choice_scoring",
    "json_field",
    "parse_action",
    "parse_plan",
    "parse_reason",
    "prompt_keys",
]
