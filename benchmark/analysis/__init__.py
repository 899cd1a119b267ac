"""Why ASK works or not: per-step records judged by the environment's expert, gate
quality (precision, recall, entropy AUROC, consultant help and harm rates) and where queries
land. The report draws them (benchmark.report.analysis); docs/analysis.md says how to read
them.

steps         StepRecorder (the evaluator's on_step hook), the steps.jsonl.gz format
quality       the summary's gate_* fields, AUROC and ROC curves
where         tallies by grid position, card rank and decision index; wall layouts"""

from benchmark.analysis.quality import auroc, auroc_ci, gate_quality, roc_curve
from benchmark.analysis.steps import (
    STEPS_FILE,
    StepRecorder,
    read_checked_steps,
    read_steps,
    steps_fields,
    write_steps,
)

__all__ = [
    "STEPS_FILE",
    "StepRecorder",
    "auroc",
    "auroc_ci",
    "gate_quality",
    "read_checked_steps",
    "read_steps",
    "roc_curve",
    "steps_fields",
    "write_steps",
]
