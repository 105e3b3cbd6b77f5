from rlvr.eval.evaluate import EvalResult, evaluate
from rlvr.eval.estimators import majority_vote, pass_at_k, stated_answer, summarize, summarize_by_difficulty, vote_key

__all__ = ["EvalResult", "evaluate", "majority_vote", "pass_at_k", "stated_answer", "summarize",
           "summarize_by_difficulty", "vote_key"]
