"""Prompt variants (ASK/ASK+, feedback-paper strategies, belief state) and action parsing.

A variant is built from conf/prompt/<name>.yaml with hydra.utils.instantiate; see base.py for the
session protocol and parse.py for the one parser every variant uses."""

from benchmark.prompts.base import Consultation, Decision, PromptSession, PromptVariant
from benchmark.prompts.parse import (
    PARSER_VERSION,
    json_field,
    parse_action,
    parse_plan,
    parse_reason,
)

# Part of the identity of every cell that asks a consultant: bump it with any change to the text
# a variant sends (tests/golden/ pins it: test_prompt_version_follows_the_golden_files).
PROMPT_VERSION = 3

__all__ = [
    "PARSER_VERSION",
    "PROMPT_VERSION",
    "Consultation",
    "Decision",
    "PromptSession",
    "PromptVariant",
    "json_field",
    "parse_action",
    "parse_plan",
    "parse_reason",
]
