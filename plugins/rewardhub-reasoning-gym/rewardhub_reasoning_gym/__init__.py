"""rewardhub-reasoning-gym: one reward per reasoning-gym dataset."""
