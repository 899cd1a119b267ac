"""Tests of benchmark.prompts, one file per module where a module has its own. A package, so a file
name may repeat in another folder (pytest imports it by its dotted path)."""
