"""rewardhub-math: the ``math_verify`` reward."""
