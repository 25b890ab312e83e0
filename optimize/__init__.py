"""Compiling the memory bank's agents against labelled QA data, and evaluating the bank.

* :mod:`optimize.hotpotqa` -- HotpotQA items from the official files or Hugging Face;
* :mod:`optimize.trainsets` -- per-agent ``dspy.Example`` sets derived from HotpotQA's labels;
* :mod:`optimize.metrics` -- DSPy metric functions (official HotpotQA answer EM/F1 among them);
* :mod:`optimize.runner` -- ``amb optimize``: compile with BootstrapFewShot, MIPROv2 or GEPA and save;
* :mod:`optimize.evaluate` -- ``amb eval``: the bank side by side with plain ReAct and one long-context call.

Nothing heavy is imported here, so ``amb --help`` stays fast.
"""
