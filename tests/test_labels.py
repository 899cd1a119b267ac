"""The methods' names (benchmark.labels): the summary prompt tells the untrained MEM1-style row
from Agent-BRACE's trained Summary-Belief, which share prompt=mem1."""

from types import SimpleNamespace

from benchmark.labels import method_label


def _cell(slm: str, prompt: str) -> SimpleNamespace:
    return SimpleNamespace(gate="always", slm=slm, prompt=prompt, rationale=False, variant=None)


def test_the_summary_prompt_names_trained_and_untrained_models_apart():
    untrained = method_label(_cell("tiny_small", "mem1"))
    trained = method_label(_cell("roles-summary_belief-summary_belief", "mem1"))
    assert untrained == "SLM-only tiny_small (mem1: MEM1-style summary, untrained)"
    assert trained == "SLM-only roles-summary_belief-summary_belief (mem1: Summary-Belief, trained)"
    assert method_label(_cell("tiny_small", "history")) == "SLM-only tiny_small (history)"
