"""Compiling the memory bank's agents against labelled QA data, and evaluating the bank.

* :mod:`optimize.hotpotqa` -- HotpotQA items from the official files or Hugging Face;
* :mod:`optimize.trainsets` -- per-agent ``dspy.Example`` sets derived from HotpotQA's labels;
* :mod:`optimize.metrics` -- DSPy metric functions (official HotpotQA answer EM/F1 among them);
* :mod:`optimize.runner` -- ``amb optimize``: compile with BootstrapFewShot, MIPROv2 or GEPA and save;
* :mod:`optimize.evaluate` -- ``amb eval``: one evaluator for every dataset (a :class:`~optimize.evaluate.Dataset`
  with solvers by mode: bank, react, context, rag; parts in :mod:`optimize.solvers`): HotpotQA
  (:mod:`optimize.hotpotqa_eval`) and LoCoMo (:mod:`optimize.locomo_eval`).

Nothing heavy is imported here, so ``amb --help`` stays fast.
"""
