"""``--num-threads`` for ``amb optimize``: DSPy's parallel evaluation and the optimizers' threads give the
same scores as one thread (only the LM's words are scripted)."""

from __future__ import annotations

import pytest
from scripted_lm import ScriptedLM
from test_optimize import SOURCE, has_demos, judge, lazy

from optimize.evaluate import EvalError, answer_all
from optimize.runner import OptimizeError, optimize_agents


def test_optimize_scores_the_same_with_threads(tmp_path):
    scores = []
    for threads in (1, 3):
        teacher = ScriptedLM(analysis=judge)
        student = ScriptedLM(analysis=lambda call: judge(call) if has_demos(call) else lazy(call))
        result = optimize_agents("analysis", SOURCE, lm=student, teacher_lm=teacher, n=12, out=tmp_path / str(threads),
                                 lm_name="scripted/student", num_threads=threads)
        scores.append((result.score_before, result.score_after, result.dev_size))
    assert scores[0] == scores[1] and scores[0][1] > scores[0][0]


def test_thread_counts_below_one_are_one_line_errors(tmp_path):
    with pytest.raises(OptimizeError, match="num_threads must be at least 1"):
        optimize_agents("analysis", SOURCE, lm=ScriptedLM(), n=12, out=tmp_path, num_threads=0)
    with pytest.raises(EvalError, match="num_threads must be at least 1"):
        answer_all([1, 2], lambda item: item, num_threads=0)


def test_answer_all_keeps_the_order_and_reports_each_result_once():
    seen = []
    assert answer_all(list(range(20)), lambda i: i * i, num_threads=4, on_result=seen.append) == [i * i for i in range(20)]
    assert sorted(seen) == [i * i for i in range(20)]
