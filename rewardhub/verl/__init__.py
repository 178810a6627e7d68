"""verl compatibility, the core's wing: launch scripts (:mod:`.scripts`), verl's legacy reward keys
(:mod:`.shim`), verl's key table (:mod:`.keys`), the ``reward:`` section's owner (:mod:`.owner`) and the
reward managers verl loads (:mod:`.managers`), and its agent loop's trajectories as chat messages
(:mod:`.chat`). Nothing here writes a key outside ``reward.*``."""
