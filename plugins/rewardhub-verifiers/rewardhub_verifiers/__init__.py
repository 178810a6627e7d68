"""rewardhub-verifiers: the rubric of every installed verifiers environment as registry rewards."""
