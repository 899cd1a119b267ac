"""Fine-tuning a consultant on expert-labelled states of a PPO policy.

dataset     PPO rollouts on training seeds -> (the evaluator's messages, the expert's answer in
            the prompt variant's output format); held-out validation states for measuring
train       transformers Trainer, the model's chat template, loss on the answer tokens only
lm          loading, padding and saving a causal LM: shared with Agent-BRACE's SFT and RL
store       the recipe, its hash, the cached model directory under a file lock, the held-out
            measurement (invalid rate, expert agreement) in finetune.json
consultant  `slm=finetuned`: the hf backend on that directory; its weights identity makes (or
            finds) the model and fingerprints it"""

from benchmark.finetune.store import FINETUNE_VERSION, Recipe, ensure, read_info

__all__ = ["FINETUNE_VERSION", "Recipe", "ensure", "read_info"]
