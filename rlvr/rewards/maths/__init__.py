"""The maths answer checker: the final answer a completion gives (answer.py), its normal form
(normalise.py), its kind (forms.py: value, tuple, set, interval, equation, ...), the comparison with
the gold (accuracy.py: `math_accuracy`), and the killable symbolic worker (worker.py)."""
from rlvr.rewards.maths.accuracy import check_answer, math_accuracy, math_accuracy_verdict

__all__ = ["check_answer", "math_accuracy", "math_accuracy_verdict"]
