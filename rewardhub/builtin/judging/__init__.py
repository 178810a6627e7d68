"""Judging you can check: pairwise and tournament judging with position swap (``llm_judge_pairwise``),
weighted rubrics (``llm_judge_rubric``), self-consistency and scores from logprobs
(``llm_judge_sampled``), and calibration against labelled examples (``rewardhub judge calibrate``, a
term's ``calibration`` gate). Imported when the registry is built, never by ``import rewardhub``.
"""
